package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// checkQuery runs the API's own parsing of the query q that flags made, so
// that a bad flag value is a usage error (exit status 2) before any request
// is sent; with --json the problem the API would answer is printed.
func (e *env) checkQuery(f *clientFlags, q url.Values, parse func(*http.Request) error) error {
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{RawQuery: q.Encode()}, Header: http.Header{}}
	err := parse(r)
	if err == nil {
		return nil
	}
	var appErr *converge.AppError
	if !errors.As(err, &appErr) {
		return &usageError{err}
	}
	if f.json {
		p := api.Problem{Type: api.ProblemType(appErr.Code), Title: "Invalid request", Status: api.ErrorStatus(appErr),
			Detail: appErr.Message, Errors: appErr.Fields}
		b, _ := json.Marshal(p)
		fmt.Fprintln(e.stdout, string(b))
	}
	parts := make([]string, 0, len(appErr.Fields))
	for _, fe := range appErr.Fields {
		parts = append(parts, "--"+fe.Field+": "+fe.Message)
	}
	if len(parts) == 0 {
		parts = append(parts, appErr.Message)
	}
	return &usageError{errors.New(strings.Join(parts, "; "))}
}

// groupCommand is a command that only groups subs: run without one, it is
// a usage error naming them in the order given ("dlq needs a command:
// list, show or purge").
func groupCommand(use, short string, subs ...*cobra.Command) *cobra.Command {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name()
	}
	list := strings.Join(names, ", ")
	if n := len(names); n > 1 {
		list = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return &usageError{fmt.Errorf("%s needs a command: %s", use, list)}
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// requireSubcommands makes every command of root that only groups
// subcommands (migrate, token, dlq, ...) a usage error when run without one:
// cobra would print its help and exit 0.
func requireSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		requireSubcommands(c)
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				names := make([]string, 0, len(cmd.Commands()))
				for _, s := range cmd.Commands() {
					if s.IsAvailableCommand() {
						names = append(names, s.Name())
					}
				}
				if len(args) > 0 {
					return &usageError{fmt.Errorf("unknown command %q for %q (one of: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))}
				}
				return &usageError{fmt.Errorf("%s needs a subcommand: one of %s", cmd.CommandPath(), strings.Join(names, ", "))}
			}
		}
	}
}
