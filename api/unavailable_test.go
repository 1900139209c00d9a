package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/converge-run/converge/api"
)

// TestErrorStatusUnavailable checks the one error → status map: a database
// that is unreachable, read-only or too slow is 503, a bug stays 500.
func TestErrorStatusUnavailable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("begin: %w", &pgconn.PgError{Code: "57P03"}), http.StatusServiceUnavailable},
		{fmt.Errorf("lock stream: %w", &pgconn.PgError{Code: "25006"}), http.StatusServiceUnavailable},
		{fmt.Errorf("lock stream: %w", &pgconn.PgError{Code: "55P03"}), http.StatusServiceUnavailable},
		{fmt.Errorf("accept: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		// A column or table missing is a bug unless the store looked and
		// found the schema not current (store.Store.Unavailable).
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "42703"}), http.StatusInternalServerError},
		{fmt.Errorf("list: %w", &pgconn.PgError{Code: "42P01"}), http.StatusInternalServerError},
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "42601"}), http.StatusInternalServerError},
		{errors.New("nil map"), http.StatusInternalServerError},
	}
	for _, tc := range cases {
		if got := api.ErrorStatus(tc.err); got != tc.want {
			t.Errorf("ErrorStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
