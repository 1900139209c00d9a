package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	names := []string{"source", "status", "cursor", "limit"}
	vals := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "deliveries [--source NAME] [--status S]",
		Short: "List the deliveries of event sources, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for _, n := range names {
				if v := *vals[n]; v != "" {
					q.Set(n, v)
				}
			}
			if err := e.checkQuery(&f, q, func(r *http.Request) error {
				_, err := api.ParseDeliveryListParams(r)
				return err
			}); err != nil {
				return err
			}
			c, err := e.client(&f)
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodGet, "/v1/deliveries", q, nil)
			if err != nil {
				return err
			}
			var page struct {
				Items      []converge.Delivery `json:"items"`
				NextCursor *string             `json:"next_cursor"`
			}
			if err := json.Unmarshal(data, &page); err != nil {
				return fmt.Errorf("read the answer: %w", err)
			}
			err = e.print(&f, data, func(w io.Writer) error {
				fmt.Fprintln(w, "ID\tRECEIVED\tSOURCE\tDELIVERY ID\tSTATUS\tRULES\tSTARTED")
				for _, d := range page.Items {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", d.ID, fmtTime(&d.ReceivedAt), d.Source, oneLine(d.DeliveryID, 40),
						d.Status, rulesList(d.MatchedRules), len(d.EventIDs)+len(d.WorkflowRunIDs))
				}
				return nil
			})
			if err == nil && !f.json && page.NextCursor != nil {
				fmt.Fprintf(e.stderr, "more: add --cursor %s\n", *page.NextCursor)
			}
			return err
		},
	}
	usage := map[string]string{
		"source": "only this source",
		"status": "accepted, ignored or rejected",
		"cursor": "the page after this cursor (printed after a full page)",
		"limit":  "page size, 1 to 500 (default 50)",
	}
	for _, n := range names {
		vals[n] = cmd.Flags().String(n, "", usage[n])
	}
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
			c, err := e.client(&f)
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodGet, "/v1/deliveries/"+id.String(), nil, nil)
			if err != nil {
				return err
			}
			var d converge.Delivery
			if err := json.Unmarshal(data, &d); err != nil {
				return fmt.Errorf("read the answer: %w", err)
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
