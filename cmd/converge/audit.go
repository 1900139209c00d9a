package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

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

// auditLine is an audit entry as GET /v1/audit answers it.
type auditLine struct {
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Role    string    `json:"role"`
	Action  string    `json:"action"`
	Targets []string  `json:"targets"`
	Reason  string    `json:"reason"`
}

// auditList is "audit list [--target T]": GET /v1/audit, a page at a time.
func (e *env) auditList(f *clientFlags) *cobra.Command {
	return listCommand(e, f, listSpec[*auditLine]{
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
		row: func(w io.Writer, a *auditLine) {
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
