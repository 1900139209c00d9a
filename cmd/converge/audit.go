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

// auditCommand is "converge audit" and its list command, over /v1/audit
// (SPEC §4 "Audit").
func (e *env) auditCommand() *cobra.Command {
	var f clientFlags
	cmd := groupCommand("audit", "Read the audit log of operator actions through the API", e.auditList(&f))
	f.add(cmd)
	return cmd
}

// auditList is "audit list [--target T]": GET /v1/audit, a page at a time
// (its entries' names decode into converge.AuditEntry's fields, as
// encoding/json matches them without regard to case).
func (e *env) auditList(f *clientFlags) *cobra.Command {
	return listCommand(e, f, listSpec[*converge.AuditEntry]{
		use:   "list",
		short: "List the audit log, newest first (--target: the entries that name a run, dead letter, workflow run, kind/resource or token)",
		path:  "/v1/audit",
		filters: []listFlag{
			{"target", "only the entries that name this: a run, dead letter or workflow run id, a stream as kind/resource, a token name"},
		},
		parse: func(r *http.Request) error {
			_, err := api.ParseAuditListParams(r)
			return err
		},
		header: "AT\tACTOR\tROLE\tACTION\tTARGETS\tREASON",
		row: func(w io.Writer, a *converge.AuditEntry) {
			targets := strings.Join(a.Targets, ",")
			if targets == "" {
				targets = "-"
			}
			reason := a.Reason
			if reason == "" {
				reason = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(&a.At), a.Actor, a.Role, a.Action, targets, reason)
		},
	})
}
