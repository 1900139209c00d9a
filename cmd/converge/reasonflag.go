package main

import (
	"errors"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// reasonFlag checks --reason with the API's own rule (api.CheckReason: at
// most 1000 characters of valid UTF-8, without NUL), so that a bad value is
// a usage error (exit status 2, under --json the usage problem naming
// reason) before any request is sent, as the other bad flag values are.
// Every command that takes --reason calls it first.
func reasonFlag(reason string) error {
	err := api.CheckReason(reason)
	if err == nil {
		return nil
	}
	var app *converge.AppError
	if errors.As(err, &app) {
		return flagUsage(app)
	}
	return &usageError{err}
}
