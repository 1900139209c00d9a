package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsOneShotViolation reports whether err is the database refusing to change
// a terminal run (G6): SQLSTATE CV006, raised by the one-shot trigger.
func IsOneShotViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "CV006"
}
