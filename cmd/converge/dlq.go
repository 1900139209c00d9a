package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// dlqCommand is "converge dlq" and its list, show, redrive, discard and
// purge commands, over /v1/dead-letters.
func (e *env) dlqCommand() *cobra.Command {
	var f clientFlags
	cmd := groupCommand("dlq", "Browse, redrive and discard dead letters through the API",
		e.dlqList(&f), e.dlqShow(&f), e.dlqAct(&f, "redrive"), e.dlqAct(&f, "discard"), e.dlqPurge(&f))
	f.add(cmd)
	return cmd
}

// dlqList is "dlq list": a page of dead letters, filtered as the API filters.
func (e *env) dlqList(f *clientFlags) *cobra.Command {
	return listCommand(e, f, listSpec[*converge.DeadLetter]{
		use:   "list [--status S] [--kind K] [--resource PREFIX] [--reason R] [--q TEXT] [--since T] [--until T]",
		short: "List dead letters, newest first (open ones unless --status says otherwise)",
		path:  "/v1/dead-letters",
		filters: []listFlag{
			{"status", "open (default), redriven, discarded or superseded"},
			{"kind", "only this kind"},
			{"resource", "only resources starting with this prefix"},
			{"reason", "permanent_error or attempts_exhausted"},
			{"q", "text one of its errors contains"},
			{"since", "created at or after this RFC 3339 time"},
			{"until", "created at or before this RFC 3339 time"},
		},
		parse: func(r *http.Request) error {
			_, err := api.ParseDeadLetterListParams(r)
			return err
		},
		header: "ID\tCREATED\tSTATUS\tKIND\tRESOURCE\tVERSION\tREASON\tATTEMPTS\tERROR",
		row: func(w io.Writer, d *converge.DeadLetter) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", d.ID, fmtTime(&d.CreatedAt), d.Status, d.Kind,
				d.Resource, d.Version, d.Reason, d.Attempts, oneLine(errorMessage(d.Error), 60))
		},
	})
}

// dlqShow is "dlq show ID": one dead letter with every attempt's error.
func (e *env) dlqShow(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter with every attempt's error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args, "dead letter")
			if err != nil {
				return err
			}
			data, d, err := callAPI[converge.DeadLetter](cmd.Context(), e, f, http.MethodGet, "/v1/dead-letters/"+ids[0].String(), nil, nil)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error {
				row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
				row("id", d.ID.String())
				row("status", string(d.Status))
				row("kind", d.Kind)
				row("resource", d.Resource)
				row("version", strconv.FormatInt(d.Version, 10))
				row("reason", string(d.Reason))
				row("attempts", strconv.Itoa(d.Attempts))
				row("event", d.EventID.String())
				row("run", d.RunID.String())
				row("created", fmtTime(&d.CreatedAt))
				row("resolved", fmtTime(d.ResolvedAt))
				if d.ResolvedBy != nil {
					row("resolved by", *d.ResolvedBy)
				}
				if d.SupersededByVersion != nil {
					row("superseded by", strconv.FormatInt(*d.SupersededByVersion, 10))
				}
				row("error", oneLine(errorMessage(d.Error), 200))
				row("payload", oneLine(string(d.Payload), 200))
				for i, er := range d.Errors {
					row(fmt.Sprintf("attempt %d", i+1), oneLine(string(er.Class)+": "+er.Message, 200))
				}
				return nil
			})
		},
	}
}

// dlqAct is "dlq redrive" or "dlq discard" (action): one id without
// --dry-run goes to the single-item route, anything else to the bulk route.
func (e *env) dlqAct(f *clientFlags, action string) *cobra.Command {
	var reason string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   action + " ID... [--reason TEXT] [--dry-run]",
		Short: map[string]string{"redrive": "Start a new run of each dead letter's event", "discard": "Mark dead letters discarded"}[action],
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := reasonFlag(reason); err != nil {
				return err
			}
			ids, err := parseIDs(args, "dead letter")
			if err != nil {
				return err
			}
			if len(ids) > converge.MaxDeadLetterBulk {
				return &usageError{fmt.Errorf("at most %d ids per call", converge.MaxDeadLetterBulk)}
			}
			c, err := e.client(f)
			if err != nil {
				return err
			}
			if len(ids) == 1 && !dryRun {
				return e.dlqActOne(cmd.Context(), c, f, action, ids[0], reason)
			}
			body := map[string]any{"ids": ids, "dry_run": dryRun}
			if reason != "" {
				body["reason"] = reason
			}
			data, err := c.do(cmd.Context(), http.MethodPost, "/v1/dead-letters/"+action, nil, body)
			if err != nil {
				return err
			}
			var res converge.DeadLetterBulkResult
			if err := json.Unmarshal(data, &res); err != nil {
				return fmt.Errorf("read the answer: %w", err)
			}
			done := map[string]string{"redrive": "redriven", "discard": "discarded"}[action]
			if dryRun {
				done = "would be " + done
			}
			err = e.print(f, data, func(w io.Writer) error {
				fmt.Fprintln(w, "ID\tRESULT")
				for _, id := range res.Done {
					fmt.Fprintf(w, "%s\t%s\n", id, done)
				}
				for _, s := range res.Skipped {
					fmt.Fprintf(w, "%s\tskipped: %s\n", s.ID, s.Reason)
				}
				return nil
			})
			if err == nil && len(res.Skipped) > 0 {
				// A failure (exit 1) whose answer, the API's, is printed:
				// with --json, the one JSON document on standard output.
				e.problemPrinted = true
				return fmt.Errorf("%d of %d dead letters were skipped", len(res.Skipped), len(res.Skipped)+len(res.Done))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check each dead letter and change nothing")
	return cmd
}

// dlqActOne redrives or discards one dead letter through its own route.
func (e *env) dlqActOne(ctx context.Context, c *apiClient, f *clientFlags, action string, id uuid.UUID, reason string) error {
	body := map[string]any{}
	if reason != "" {
		body["reason"] = reason
	}
	data, err := c.do(ctx, http.MethodPost, "/v1/dead-letters/"+id.String()+"/"+action, nil, body)
	if err != nil {
		return err
	}
	if action == "redrive" {
		var res struct {
			Run converge.Run `json:"run"`
		}
		if err := json.Unmarshal(data, &res); err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		return e.print(f, data, func(w io.Writer) error {
			fmt.Fprintln(w, "DEAD LETTER\tRUN\tNUMBER\tSTATUS\tMAX ATTEMPTS")
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\n", id, res.Run.ID, res.Run.Number, res.Run.Status, res.Run.MaxAttempts)
			return nil
		})
	}
	var d converge.DeadLetter
	if err := json.Unmarshal(data, &d); err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	return e.print(f, data, func(w io.Writer) error {
		fmt.Fprintln(w, "DEAD LETTER\tSTATUS\tRESOLVED\tBY")
		by := "-"
		if d.ResolvedBy != nil {
			by = *d.ResolvedBy
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", d.ID, d.Status, fmtTime(d.ResolvedAt), by)
		return nil
	})
}

// dlqPurge is "dlq purge": deletes discarded dead letters, every one or
// those discarded longer ago than --older-than.
func (e *env) dlqPurge(f *clientFlags) *cobra.Command {
	var olderThan, reason string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "purge [--older-than DURATION] [--dry-run] [--reason TEXT]",
		Short: "Delete discarded dead letters, all or those discarded longer ago than DURATION (audited)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := reasonFlag(reason); err != nil {
				return err
			}
			body := map[string]any{"dry_run": dryRun}
			if cmd.Flags().Changed("older-than") {
				if d, err := converge.ParseDuration(olderThan); err != nil || d < 0 {
					return &usageError{fmt.Errorf("--older-than must be a duration like 720h or 30d, not negative")}
				}
				body["older_than"] = olderThan
			}
			if reason != "" {
				body["reason"] = reason
			}
			data, res, err := callAPI[converge.DeadLetterPurgeResult](cmd.Context(), e, f, http.MethodPost, "/v1/dead-letters/purge", nil, body)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error {
				verb := "purged"
				if dryRun {
					verb = "would purge"
				}
				more := ""
				if res.More {
					more = " (more remain: run it again)"
				}
				fmt.Fprintf(w, "%s %d discarded dead letters%s\n", verb, len(res.Purged), more)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "only those discarded longer ago than this, like 720h or 30d (default: every discarded one)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count and change nothing")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}

// parseIDs parses the ids of what (dead letter, run, workflow run); a
// malformed one is a usage error naming what it is not.
func parseIDs(args []string, what string) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(args))
	for i, a := range args {
		id, err := uuid.Parse(a)
		if err != nil {
			return nil, &usageError{fmt.Errorf("%q is not a %s id", a, what)}
		}
		ids[i] = id
	}
	return ids, nil
}
