package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
)

// submitCommand is "converge submit": POST /v1/events.
func (e *env) submitCommand() *cobra.Command {
	var f clientFlags
	var kind, resource, payload string
	var version int64
	cmd := &cobra.Command{
		Use:   "submit --kind KIND --resource KEY --version N [--payload JSON]",
		Short: "Submit an event through the API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := streamFlags("kind", kind, resource, version, payload)
			if err != nil {
				return err
			}
			body := map[string]any{"kind": kind, "resource": resource, "version": version}
			if p != nil {
				body["payload"] = p
			}
			data, res, err := callAPI[struct {
				Event          converge.Event `json:"event"`
				Run            converge.Run   `json:"run"`
				SupersededRuns []uuid.UUID    `json:"superseded_runs"`
			}](cmd.Context(), e, &f, http.MethodPost, "/v1/events", nil, body)
			if err != nil {
				return err
			}
			return e.print(&f, data, func(w io.Writer) error {
				trace := "-"
				if res.Run.TraceID != nil {
					trace = *res.Run.TraceID
				}
				fmt.Fprintln(w, "EVENT\tKIND\tRESOURCE\tVERSION\tRUN\tSTATUS\tSUPERSEDED\tTRACE")
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", res.Event.ID, res.Event.Kind, res.Event.Resource,
					res.Event.Version, res.Run.ID, res.Event.Status, len(res.SupersededRuns), trace)
				return nil
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&kind, "kind", "", "the event's kind (required)")
	cmd.Flags().StringVar(&resource, "resource", "", "the resource key (required)")
	cmd.Flags().Int64Var(&version, "version", 0, "the version, a positive integer (required)")
	cmd.Flags().StringVar(&payload, "payload", "", "a JSON object (default {})")
	for _, name := range []string{"kind", "resource", "version"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
