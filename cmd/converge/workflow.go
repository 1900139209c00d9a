package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge/api"
)

// workflowRunAnswer is a workflow run as the API answers it.
type workflowRunAnswer struct {
	ID         uuid.UUID       `json:"id"`
	Workflow   string          `json:"workflow"`
	Resource   string          `json:"resource"`
	Version    int64           `json:"version"`
	Status     string          `json:"status"`
	Payload    json.RawMessage `json:"payload"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	Steps      []struct {
		Name     string     `json:"name"`
		Kind     string     `json:"kind"`
		Resource string     `json:"resource"`
		Needs    []string   `json:"needs"`
		Status   string     `json:"status"`
		EventID  *uuid.UUID `json:"event_id"`
		RunID    *uuid.UUID `json:"run_id"`
	} `json:"steps"`
}

// progress is "2/4 succeeded".
func (w *workflowRunAnswer) progress() string {
	n := 0
	for _, s := range w.Steps {
		if s.Status == "succeeded" {
			n++
		}
	}
	return fmt.Sprintf("%d/%d succeeded", n, len(w.Steps))
}

// workflowCommand is "converge workflow" and its start, list, show and
// cancel commands, over /v1/workflow-runs.
func (e *env) workflowCommand() *cobra.Command {
	var f clientFlags
	cmd := groupCommand("workflow", "Start, list, show and cancel workflow runs through the API",
		e.workflowStart(&f), e.workflowList(&f), e.workflowShow(&f), e.workflowCancel(&f))
	f.add(cmd)
	return cmd
}

// workflowStart is "workflow start": POST /v1/workflow-runs.
func (e *env) workflowStart(f *clientFlags) *cobra.Command {
	var workflow, resource, payload string
	var version int64
	cmd := &cobra.Command{
		Use:   "start --workflow NAME --resource KEY --version N [--payload JSON]",
		Short: "Start a workflow run (its root steps are accepted at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := streamFlags("workflow", workflow, resource, version, payload)
			if err != nil {
				return err
			}
			body := map[string]any{"workflow": workflow, "resource": resource, "version": version}
			if p != nil {
				body["payload"] = p
			}
			data, res, err := callAPI[struct {
				WorkflowRun workflowRunAnswer `json:"workflow_run"`
			}](cmd.Context(), e, f, http.MethodPost, "/v1/workflow-runs", nil, body)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error {
				r := res.WorkflowRun
				fmt.Fprintln(w, "WORKFLOW RUN\tWORKFLOW\tRESOURCE\tVERSION\tSTATUS\tSTEPS")
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Workflow, r.Resource, r.Version, r.Status, r.progress())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "a configured workflow (required)")
	cmd.Flags().StringVar(&resource, "resource", "", "the resource key (required)")
	cmd.Flags().Int64Var(&version, "version", 0, "the version, a positive integer (required)")
	cmd.Flags().StringVar(&payload, "payload", "", "a JSON object (default {})")
	for _, name := range []string{"workflow", "resource", "version"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// workflowList is "workflow list": a page of workflow runs.
func (e *env) workflowList(f *clientFlags) *cobra.Command {
	return listCommand(e, f, listSpec[workflowRunAnswer]{
		use:   "list [--workflow NAME] [--resource KEY] [--status S]",
		short: "List workflow runs, newest first",
		path:  "/v1/workflow-runs",
		filters: []listFlag{
			{"workflow", "only this workflow"},
			{"resource", "only this resource (exact key)"},
			{"status", "running, waiting, succeeded, failed, superseded or cancelled"},
		},
		parse: func(r *http.Request) error {
			_, err := api.ParseWorkflowRunListParams(r)
			return err
		},
		header: "ID\tCREATED\tWORKFLOW\tRESOURCE\tVERSION\tSTATUS\tSTEPS",
		row: func(w io.Writer, r workflowRunAnswer) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, fmtTime(&r.CreatedAt), r.Workflow, r.Resource, r.Version, r.Status, r.progress())
		},
	})
}

// workflowShow is "workflow show ID": one workflow run with its steps.
func (e *env) workflowShow(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one workflow run with each step's status, event and run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args, "workflow run")
			if err != nil {
				return err
			}
			data, r, err := callAPI[workflowRunAnswer](cmd.Context(), e, f, http.MethodGet, "/v1/workflow-runs/"+ids[0].String(), nil, nil)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error { return printWorkflowRun(w, r) })
		},
	}
}

func printWorkflowRun(w io.Writer, r *workflowRunAnswer) error {
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("id", r.ID.String())
	row("workflow", r.Workflow)
	row("resource", r.Resource)
	row("version", strconv.FormatInt(r.Version, 10))
	row("status", r.Status)
	row("created", fmtTime(&r.CreatedAt))
	row("finished", fmtTime(r.FinishedAt))
	row("payload", oneLine(string(r.Payload), 200))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "STEP\tKIND\tRESOURCE\tNEEDS\tSTATUS\tEVENT\tRUN")
	for _, s := range r.Steps {
		needs := strings.Join(s.Needs, ",")
		if needs == "" {
			needs = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, s.Resource, needs, s.Status, idOrDash(s.EventID), idOrDash(s.RunID))
	}
	return nil
}

func idOrDash(id *uuid.UUID) string {
	if id == nil {
		return "-"
	}
	return id.String()
}

// workflowCancel is "workflow cancel ID": POST /v1/workflow-runs/{id}/cancel.
func (e *env) workflowCancel(f *clientFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID [--reason TEXT]",
		Short: "Cancel a workflow run: its unfinished step runs end cancelled, its pending steps skipped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := reasonFlag(reason); err != nil {
				return err
			}
			ids, err := parseIDs(args, "workflow run")
			if err != nil {
				return err
			}
			body := map[string]any{}
			if reason != "" {
				body["reason"] = reason
			}
			data, r, err := callAPI[workflowRunAnswer](cmd.Context(), e, f, http.MethodPost, "/v1/workflow-runs/"+ids[0].String()+"/cancel", nil, body)
			if err != nil {
				return err
			}
			return e.print(f, data, func(w io.Writer) error { return printWorkflowRun(w, r) })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}
