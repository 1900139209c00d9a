package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// runsCommand is "converge runs" and its approve and reject commands, over
// /v1/runs/{id}/approve and /reject (SPEC §11).
func (e *env) runsCommand() *cobra.Command {
	var f clientFlags
	cmd := groupCommand("runs", "Approve or reject held runs through the API",
		e.runsDecide(&f, "approve", "Approve a held run: it is queued when nothing else holds it"),
		e.runsDecide(&f, "reject", "Reject a held run: it ends cancelled"))
	f.add(cmd)
	return cmd
}

// runsDecide is "runs approve|reject ID [--reason TEXT]".
func (e *env) runsDecide(f *clientFlags, action, short string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   action + " ID [--reason TEXT]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := reasonFlag(reason); err != nil {
				return err
			}
			ids, err := parseIDs(args, "run")
			if err != nil {
				return err
			}
			body := map[string]any{}
			if reason != "" {
				body["reason"] = reason
			}
			data, r, err := callAPI[converge.Run](cmd.Context(), e, f, http.MethodPost, "/v1/runs/"+ids[0].String()+"/"+action, nil, body)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error {
				fmt.Fprintln(w, "RUN\tSTATUS\tHOLD")
				fmt.Fprintf(w, "%s\t%s\t%s\n", r.ID, r.Status, holdText(r.Hold))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}

func holdText(hold []string) string {
	if len(hold) == 0 {
		return "-"
	}
	return strings.Join(hold, ",")
}

// quarantineCommand is "converge quarantine" and its list and release
// commands, over /v1/quarantine (SPEC §11).
func (e *env) quarantineCommand() *cobra.Command {
	var f clientFlags
	cmd := groupCommand("quarantine", "List and release quarantined streams through the API",
		e.quarantineList(&f), e.quarantineRelease(&f))
	f.add(cmd)
	return cmd
}

// quarantineList is "quarantine list": GET /v1/quarantine, a page at a
// time.
func (e *env) quarantineList(f *clientFlags) *cobra.Command {
	return listCommand(e, f, listSpec[*converge.Quarantine]{
		use:   "list",
		short: "List quarantined streams, newest first",
		path:  "/v1/quarantine",
		parse: func(r *http.Request) error {
			_, err := api.ParseQuarantineListParams(r)
			return err
		},
		header: "KIND\tRESOURCE\tSINCE\tFAILED RUNS\tHELD RUN",
		row: func(w io.Writer, q *converge.Quarantine) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", q.Kind, q.Resource, fmtTime(&q.Since), q.FailedRuns, idOrDash(q.HeldRunID))
		},
	})
}

// quarantineRelease is "quarantine release KIND RESOURCE [--reason TEXT]":
// POST /v1/quarantine/{kind}/{resource}/release.
func (e *env) quarantineRelease(f *clientFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "release KIND RESOURCE [--reason TEXT]",
		Short: "Release a quarantined stream: its latest held run is queued when nothing else holds it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := reasonFlag(reason); err != nil {
				return err
			}
			if err := converge.ValidateKind(args[0]); err != nil {
				return &usageError{fmt.Errorf("kind: %w", err)}
			}
			if err := converge.ValidateResource(args[1]); err != nil {
				return &usageError{fmt.Errorf("resource: %w", err)}
			}
			body := map[string]any{}
			if reason != "" {
				body["reason"] = reason
			}
			// A resource key's characters need no escaping in a path, and
			// its slashes are part of the route.
			data, r, err := callAPI[struct {
				Kind     string        `json:"kind"`
				Resource string        `json:"resource"`
				Run      *converge.Run `json:"run"`
			}](cmd.Context(), e, f, http.MethodPost, "/v1/quarantine/"+args[0]+"/"+args[1]+"/release", nil, body)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error {
				fmt.Fprintln(w, "KIND\tRESOURCE\tRUN\tSTATUS")
				if r.Run == nil {
					fmt.Fprintf(w, "%s\t%s\t-\t-\n", r.Kind, r.Resource)
					return nil
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Kind, r.Resource, r.Run.ID, r.Run.Status)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}
