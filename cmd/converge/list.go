package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/spf13/cobra"
)

// listFlag is a filter of a list command: its flag, sent as the query
// parameter of the same name when set, and the flag's usage.
type listFlag struct{ name, usage string }

// pageFlags are the paging flags of every list command, after its filters.
var pageFlags = []listFlag{
	{"cursor", "the page after this cursor (printed after a full page)"},
	{"limit", "page size, 1 to 500 (default 50)"},
}

// listSpec is a list command over a paged list route of the API.
type listSpec[T any] struct {
	use, short string
	// path is the route ("/v1/dead-letters"); filters its query
	// parameters but cursor and limit; parse the API's parser of them,
	// which checks them before anything is sent (checkQuery).
	path    string
	filters []listFlag
	parse   func(*http.Request) error
	// header is the table's first line; row prints an item as a line.
	header string
	row    func(w io.Writer, item T)
}

// listPage is a page of a list route's answer.
type listPage[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// listCommand is the command of s: GET s.path with the flags that are set
// as its query, the page printed as a table (or as it came with --json),
// and, after a full page, the cursor of the next one on standard error.
func listCommand[T any](e *env, f *clientFlags, s listSpec[T]) *cobra.Command {
	flags := slices.Concat(s.filters, pageFlags)
	vals := make([]*string, len(flags))
	cmd := &cobra.Command{
		Use:   s.use,
		Short: s.short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for i, fl := range flags {
				if v := *vals[i]; v != "" {
					q.Set(fl.name, v)
				}
			}
			if err := checkQuery(q, s.parse); err != nil {
				return err
			}
			data, page, err := callAPI[listPage[T]](cmd.Context(), e, f, http.MethodGet, s.path, q, nil)
			if err != nil {
				return err
			}
			err = e.print(f, data, func(w io.Writer) error {
				fmt.Fprintln(w, s.header)
				for _, item := range page.Items {
					s.row(w, item)
				}
				return nil
			})
			if err == nil && !f.json && page.NextCursor != nil {
				fmt.Fprintf(e.stderr, "more: add --cursor %s\n", *page.NextCursor)
			}
			return err
		},
	}
	for i, fl := range flags {
		vals[i] = cmd.Flags().String(fl.name, "", fl.usage)
	}
	return cmd
}
