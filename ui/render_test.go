package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/store"
)

// TestAppErrorStatus checks that a dashboard action's error is shown with
// the status the API gives its code (api.ErrorStatus), not as a 500: the
// dashboard once had a map of its own that made unauthorized, stale-version
// and payload-too-large errors internal errors.
func TestAppErrorStatus(t *testing.T) {
	t.Parallel()
	u, err := New(Config{Store: store.New(nil, nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Authenticate: func(ctx context.Context, token string) (*converge.Actor, error) { return nil, errors.New("unused") }})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		err    error
		status int
	}{
		{converge.Errorf(converge.EUNAUTHORIZED, "the token is not valid"), http.StatusUnauthorized},
		{&converge.AppError{Code: converge.ESTALEVERSION, Message: "version 3 is below the latest 5"}, http.StatusConflict},
		{converge.Errorf(converge.ETOOLARGE, "the request body is over the limit of 1048576 bytes"), http.StatusRequestEntityTooLarge},
		{converge.Errorf(converge.EVERSIONCONFLICT, "version 5 was accepted with another payload"), http.StatusConflict},
		{converge.Errorf(converge.EMALFORMED, "the body is not valid JSON"), http.StatusBadRequest},
		{fmt.Errorf("redrive: %w", converge.Errorf(converge.ENOTFOUND, "no dead letter x")), http.StatusNotFound},
		{converge.Errorf(converge.EINVALID, "ids: is not an id"), http.StatusUnprocessableEntity},
		{converge.Errorf(converge.EFORBIDDEN, "this needs the operator role"), http.StatusForbidden},
		{converge.Errorf(converge.ENOTOPEN, "the dead letter is discarded"), http.StatusConflict},
		{converge.Errorf(converge.ESUPERSEDED, "version 4 was accepted since"), http.StatusConflict},
		{converge.Errorf(converge.ERUNFINISHED, "the run succeeded"), http.StatusConflict},
		{converge.Errorf(converge.ECONFLICT, "its stream has an unfinished run"), http.StatusConflict},
	} {
		code := converge.ErrorCode(x.err)
		t.Run(code, func(t *testing.T) {
			if got := api.ErrorStatus(x.err); got != x.status {
				t.Fatalf("api.ErrorStatus = %d, want %d", got, x.status)
			}
			w := httptest.NewRecorder()
			u.appError(w, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/ui/dead-letters/bulk", nil), x.err)
			if w.Code != x.status {
				t.Fatalf("%s error shown with status %d, want %d\n%s", code, w.Code, x.status, w.Body)
			}
			var ae *converge.AppError
			errors.As(x.err, &ae)
			if body := w.Body.String(); !strings.Contains(body, http.StatusText(x.status)) || !strings.Contains(body, ae.Message) {
				t.Errorf("%s error page does not say %q and %q:\n%s", code, http.StatusText(x.status), ae.Message, body)
			}
		})
	}
	t.Run("internal", func(t *testing.T) {
		w := httptest.NewRecorder()
		u.appError(w, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/ui/dead-letters/bulk", nil), errors.New("pq: secret detail"))
		if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "secret detail") {
			t.Fatalf("internal error shown as %d:\n%s", w.Code, w.Body)
		}
	})
}

// TestSentence: an application error's message reads as a sentence in a
// flash.
func TestSentence(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"run is already finished":          "Run is already finished.",
		"dead letter is not open.":         "Dead letter is not open.",
		"état inconnu":                     "État inconnu.",
		"":                                 "",
		"Already a sentence, with a stop.": "Already a sentence, with a stop.",
	} {
		if got := sentence(in); got != want {
			t.Errorf("sentence(%q) = %q, want %q", in, got, want)
		}
	}
}
