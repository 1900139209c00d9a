package main

import (
	"errors"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
)

// The problem body a command prints with --json when it fails (SPEC §4):
// an API client command prints the API's (apiClient.do); a command that
// runs here, against the database or the configuration (prune, migrate,
// token, source test, bench), prints the problem of its error, made by
// failureProblem, once run has its error.

// dbUnreachable is a database that could not be reached (openPool): with
// --json, the problem unavailable, as the API answers when it cannot
// reach its database. Its text is the error's.
type dbUnreachable struct{ err error }

func (e *dbUnreachable) Error() string { return e.err.Error() }
func (e *dbUnreachable) Unwrap() error { return e.err }

// failureProblem is the problem of err, a command's failure that is not
// an API answer: the application error it is (the prune lease's conflict,
// a rule's mapping-failed), with err's whole text as the detail when err
// wraps it; a configuration error as invalid-request naming its key; a
// database that cannot be reached as unavailable; anything else internal,
// with err's text as the detail.
func failureProblem(err error) *converge.AppError {
	var ae *converge.AppError
	var ke *config.KeyError
	var du *dbUnreachable
	switch {
	case errors.As(err, &ae):
		if err.Error() == ae.Error() {
			return ae
		}
		return &converge.AppError{Code: ae.Code, Message: err.Error(), Fields: ae.Fields}
	case errors.As(err, &ke):
		return &converge.AppError{Code: converge.EINVALID, Message: ke.Error(), Fields: []converge.FieldError{{Field: ke.Key, Message: ke.Message}}}
	case errors.As(err, &du):
		return &converge.AppError{Code: converge.EUNAVAILABLE, Message: err.Error()}
	}
	return &converge.AppError{Code: converge.EINTERNAL, Message: err.Error()}
}
