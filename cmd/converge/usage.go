package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// checkQuery runs the API's own parsing of the query q that flags made, so
// that a bad flag value is a usage error (exit status 2) before any request
// is sent; with --json the problem the API would answer is printed (run).
func checkQuery(q url.Values, parse func(*http.Request) error) error {
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{RawQuery: q.Encode()}, Header: http.Header{}}
	err := parse(r)
	if err == nil {
		return nil
	}
	var appErr *converge.AppError
	if !errors.As(err, &appErr) {
		return &usageError{err}
	}
	return flagUsage(appErr)
}

// flagProblem is a bad flag value found before a request is sent: its
// message names the flags ("--limit: must be ..."), and app is the problem
// the API would answer, which --json prints.
type flagProblem struct {
	msg string
	app *converge.AppError
}

func (p *flagProblem) Error() string { return p.msg }
func (p *flagProblem) Unwrap() error { return p.app }

// flagUsage is the usage error of app, an EINVALID error whose fields are
// flags of the same names.
func flagUsage(app *converge.AppError) error {
	parts := make([]string, 0, len(app.Fields))
	for _, fe := range app.Fields {
		parts = append(parts, "--"+fe.Field+": "+fe.Message)
	}
	if len(parts) == 0 {
		parts = append(parts, app.Message)
	}
	return &usageError{&flagProblem{msg: strings.Join(parts, "; "), app: app}}
}

// flagParseError is a flag cobra could not parse: the flags after it were
// not read, so --json is looked for in the arguments (jsonRequested).
type flagParseError struct{ err error }

func (e *flagParseError) Error() string {
	if app := flagParseProblem(e.err); app != nil {
		return app.Message
	}
	return e.err.Error()
}
func (e *flagParseError) Unwrap() error { return e.err }

// jsonRequested says whether the command line asked for --json: the flag's
// value when cmd has one and its flags were parsed, else whether args hold
// --json (or --json=true) before a "--".
func jsonRequested(cmd *cobra.Command, args []string, err error) bool {
	var pe *flagParseError
	if f := cmd.Flags().Lookup("json"); f != nil && !errors.As(err, &pe) {
		return f.Value.String() == "true"
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" {
			return true
		}
		if v, ok := strings.CutPrefix(a, "--json="); ok {
			b, err := strconv.ParseBool(v)
			return err == nil && b
		}
	}
	return false
}

// printProblem prints the problem body of e on w, one line, the shape the
// API answers (api.NewProblem).
func printProblem(w io.Writer, e *converge.AppError) {
	b, _ := json.Marshal(api.NewProblem(e))
	fmt.Fprintln(w, string(b))
}

// usageProblem is the problem of a usage error: the API's problem when the
// error stands for one (checkQuery, streamFlags), else invalid-request
// with the error's message as the detail.
func usageProblem(err error) *converge.AppError {
	var appErr *converge.AppError
	if errors.As(err, &appErr) {
		return appErr
	}
	if app := flagParseProblem(err); app != nil {
		return app
	}
	return &converge.AppError{Code: converge.EINVALID, Message: err.Error()}
}

// quotedFlagNames finds the flag names in cobra's "required flag(s)" error.
var quotedFlagNames = regexp.MustCompile(`"([^"]+)"`)

// flagParseProblem is the problem of a flag pflag could not parse, or of
// required flags left out (cobra), with the flags named under errors as
// fields, and without the Go parser's own words ("strconv.ParseInt:
// parsing ..."); nil for another error.
func flagParseProblem(err error) *converge.AppError {
	var (
		invalid  *pflag.InvalidValueError
		required *pflag.ValueRequiredError
	)
	var name, msg string
	switch {
	case errors.As(err, &invalid):
		name = invalid.GetFlag().Name
		msg = fmt.Sprintf("%q is not a valid %s", invalid.GetValue(), flagTypeWords(invalid.GetFlag().Value.Type()))
	case errors.As(err, &required):
		name = required.GetFlag().Name
		msg = "needs a value"
	case strings.HasPrefix(err.Error(), "required flag(s) "):
		// cobra's own error for flags marked required and left out:
		// required flag(s) "resource", "version" not set.
		var fields []converge.FieldError
		var flags []string
		for _, m := range quotedFlagNames.FindAllStringSubmatch(err.Error(), -1) {
			fields = append(fields, converge.FieldError{Field: m[1], Message: "is required"})
			flags = append(flags, "--"+m[1])
		}
		if len(fields) == 0 {
			return nil
		}
		return &converge.AppError{Code: converge.EINVALID, Message: strings.Join(flags, ", ") + ": required", Fields: fields}
	default:
		return nil
	}
	return &converge.AppError{Code: converge.EINVALID, Message: "--" + name + ": " + msg,
		Fields: []converge.FieldError{{Field: name, Message: msg}}}
}

// flagTypeWords names a pflag value type for a person.
func flagTypeWords(typ string) string {
	switch typ {
	case "int", "int64", "int32":
		return "whole number"
	case "uint", "uint64", "uint32":
		return "non-negative whole number"
	case "float64", "float32":
		return "number"
	case "duration":
		return "duration (like 500ms, 30s or 5m)"
	case "bool":
		return "boolean (true or false)"
	case "stringSlice", "stringArray":
		return "list"
	}
	return typ
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
				names := commandNames(cmd)
				if len(args) > 0 {
					return &usageError{fmt.Errorf("unknown command %q for %q (one of: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))}
				}
				return &usageError{fmt.Errorf("%s needs a subcommand: one of %s", cmd.CommandPath(), strings.Join(names, ", "))}
			}
		}
	}
}

// commandNames are the names of cmd's available subcommands.
func commandNames(cmd *cobra.Command) []string {
	names := make([]string, 0, len(cmd.Commands()))
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}
