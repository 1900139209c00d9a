package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/source"
)

// sourceCommand is "converge source" and its test, deliveries and delivery
// commands.
func (e *env) sourceCommand() *cobra.Command {
	return groupCommand("source", "Work with the configured event sources (sources: in the configuration)",
		e.sourceTest(), e.sourceDeliveries(), e.sourceDelivery())
}

// sourceTest is "source test": the rules of a source evaluated on a body
// from a file, as POST /hooks/{source} would evaluate them, without
// checking a signature and without writing anything.
func (e *env) sourceTest() *cobra.Command {
	var configPath, file string
	var headers []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "test NAME --file body.json [--header k=v]... [--json]",
		Short: "Print which rules of a source match a body and what each would start, writing nothing",
		Long: `Evaluates the rules of source NAME on the body in --file and the headers given with
--header (Content-Type defaults to application/json), as POST /hooks/NAME would, and
prints for each rule whether it matches and what it would start. Nothing is written,
no database is needed and no signature is checked (secrets need not be set). It exits 1
when a rule's expression fails (the delivery would be answered 422 mapping-failed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return &usageError{errors.New("--file is required (the body to test, - for standard input)")}
			}
			h := http.Header{}
			for _, kv := range headers {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || strings.TrimSpace(k) == "" {
					return &usageError{fmt.Errorf("--header %q: want name=value", kv)}
				}
				h.Add(strings.TrimSpace(k), v)
			}
			if h.Get("Content-Type") == "" {
				h.Set("Content-Type", "application/json")
			}
			cfg, err := e.loadRulesConfig(configPath)
			if err != nil {
				return err
			}
			body, err := readBody(file, cfg.MaxPayloadBytes, os.Stdin)
			if err != nil {
				return err
			}
			sources, err := source.Compile(cfg.SourceDefs())
			if err != nil {
				return config.Keyed(err)
			}
			res, err := sources.Test(args[0], h, body)
			if err != nil {
				var ae *converge.AppError
				if errors.As(err, &ae) && ae.Code == converge.ENOTFOUND {
					return converge.Errorf(converge.ENOTFOUND, "no source %q in the configuration (configured: %s)", args[0], strings.Join(cfg.SourceNames(), ", "))
				}
				return err
			}
			if asJSON {
				b, err := json.Marshal(res)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, string(b))
				e.problemPrinted = true // the verdict is the answer, also when it fails
			} else {
				printSourceTest(e.stdout, res)
			}
			if res.Status == string(converge.DeliveryRejected) {
				return errors.New("a rule's expression fails: the delivery would be answered 422 mapping-failed")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	cmd.Flags().StringVar(&file, "file", "", "the body to test (- for standard input)")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "a request header name=value (repeatable), such as x-github-event=push")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// loadRulesConfig loads the configuration for evaluating rules: no
// database is needed, and an environment variable holding a secret that
// is not set is given a placeholder (nothing is signed or verified); the
// database's variables (DATABASE_URL, DATABASE_DIRECT_URL) and converge's
// own are read as they are.
func (e *env) loadRulesConfig(path string) (*config.Config, error) {
	if path == "" {
		path = e.getenv("CONVERGE_CONFIG")
	}
	// A Standard Webhooks secret of 32 zero bytes: it satisfies every
	// secret's format and signs nothing.
	const placeholder = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	getenv := func(k string) string {
		if v := e.getenv(k); v != "" || strings.HasPrefix(k, "DATABASE_") || strings.HasPrefix(k, "CONVERGE_") {
			return v
		}
		return placeholder
	}
	return config.Load(path, getenv)
}

// readBody reads the body to test from path (- for stdin), refusing one
// over max bytes as the server would (413).
func readBody(path string, max int64, stdin io.Reader) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			// A file that cannot be opened is a bad --file (exit 2).
			return nil, &usageError{fmt.Errorf("--file: %w", err)}
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > max {
		return nil, converge.Errorf(converge.ETOOLARGE, "the body is over max_payload_bytes (%d): the source would be answered 413", max)
	}
	return b, nil
}

// printSourceTest prints a source test as a line and a table of rules.
func printSourceTest(w io.Writer, t *converge.SourceTest) {
	what := map[string]string{
		"accepted": "would be accepted", "ignored": "would be ignored (no rule matches)",
		"rejected": "would be rejected (422 mapping-failed)",
	}[t.Status]
	id := ""
	if t.DeliveryID != "" {
		id = " " + t.DeliveryID
	}
	fmt.Fprintf(w, "source %s: delivery%s %s\n", t.Source, id, what)
	if len(t.Rules) == 0 {
		return
	}
	rows := [][]string{{"RULE", "MATCH", "STARTS", "RESOURCE", "VERSION", "PAYLOAD"}}
	for _, r := range t.Rules {
		starts := "kind " + r.Kind
		if r.Workflow != "" {
			starts = "workflow " + r.Workflow
		}
		row := []string{fmt.Sprintf("rules[%d]", r.Rule), "no", starts, "-", "-", "-"}
		switch {
		case r.Error != "":
			row[1], row[5] = "error", oneLine(r.Error, 120)
		case r.Matched:
			row[1], row[3], row[5] = "yes", r.Resource, oneLine(string(r.Payload), 80)
			row[4] = fmt.Sprint(r.Version)
			if r.VersionAuto {
				row[4] = "auto"
			}
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c + strings.Repeat(" ", widths[i]-len([]rune(c))+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
