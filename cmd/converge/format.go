package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/converge-run/converge"
)

// print writes the raw answer (--json) or the table made by table.
func (e *env) print(f *clientFlags, data []byte, table func(io.Writer) error) error {
	if f.json {
		_, err := fmt.Fprintln(e.stdout, strings.TrimSpace(string(data)))
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if err := table(tw); err != nil {
		return err
	}
	return tw.Flush()
}

// fmtTime formats t in UTC to the second, or "-" for nil.
func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// errorMessage is e's message, or "-" for nil.
func errorMessage(e *converge.Error) string {
	if e == nil {
		return "-"
	}
	return e.Message
}

// oneLine flattens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
