package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// sourceDeliveries is "source deliveries": a page of deliveries through
// GET /v1/deliveries, filtered as the API filters.
func (e *env) sourceDeliveries() *cobra.Command {
	var f clientFlags
	cmd := listCommand(e, &f, listSpec[converge.Delivery]{
		use:   "deliveries [--source NAME] [--status S]",
		short: "List the deliveries of event sources, newest first",
		path:  "/v1/deliveries",
		filters: []listFlag{
			{"source", "only this source"},
			{"status", "accepted, ignored or rejected"},
		},
		parse: func(r *http.Request) error {
			_, err := api.ParseDeliveryListParams(r)
			return err
		},
		header: "ID\tRECEIVED\tSOURCE\tDELIVERY ID\tSTATUS\tRULES\tSTARTED",
		row: func(w io.Writer, d converge.Delivery) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", d.ID, fmtTime(&d.ReceivedAt), d.Source, oneLine(d.DeliveryID, 40),
				d.Status, rulesList(d.MatchedRules), len(d.EventIDs)+len(d.WorkflowRunIDs))
		},
	})
	f.add(cmd)
	return cmd
}

// sourceDelivery is "source delivery ID": one delivery through GET
// /v1/deliveries/{id}.
func (e *env) sourceDelivery() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "delivery ID",
		Short: "Show one delivery: its status, matched rules and what it started",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return &usageError{fmt.Errorf("%q is not a delivery id (a UUID; see converge source deliveries)", args[0])}
			}
			data, d, err := callAPI[converge.Delivery](cmd.Context(), e, &f, http.MethodGet, "/v1/deliveries/"+id.String(), nil, nil)
			if err != nil {
				return err
			}
			return e.print(&f, data, func(w io.Writer) error {
				fmt.Fprintf(w, "delivery\t%s\nsource\t%s\ndelivery id\t%s\nreceived\t%s\nstatus\t%s\nrules matched\t%s\n",
					d.ID, d.Source, d.DeliveryID, fmtTime(&d.ReceivedAt), d.Status, rulesList(d.MatchedRules))
				for _, id := range d.EventIDs {
					fmt.Fprintf(w, "event\t%s\n", id)
				}
				for _, id := range d.WorkflowRunIDs {
					fmt.Fprintf(w, "workflow run\t%s\n", id)
				}
				if len(d.Error) > 0 {
					var p struct {
						Detail string `json:"detail"`
					}
					_ = json.Unmarshal(d.Error, &p)
					fmt.Fprintf(w, "error\tmapping-failed: %s\n", p.Detail)
				}
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

// rulesList is "rules[0], rules[2]", or "-" for none.
func rulesList(rules []int) string {
	if len(rules) == 0 {
		return "-"
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = fmt.Sprintf("rules[%d]", r)
	}
	return strings.Join(out, ", ")
}
