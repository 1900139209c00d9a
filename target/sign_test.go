package target

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const testSigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSignerSpecExample signs the example message of the Standard Webhooks
// specification and gets its published signature.
func TestSignerSpecExample(t *testing.T) {
	t.Parallel()
	s, err := NewSigner(testSigningSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Signature("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
}

func TestNewSignerRefuses(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"", "whsec_", "whsec_not base64!", "whsec_c2hvcnQ="} {
		if _, err := NewSigner(secret); !errors.Is(err, ErrSigningSecret) {
			t.Errorf("NewSigner(%q): %v, want ErrSigningSecret", secret, err)
		}
	}
}

// TestHTTPSigned calls a target that verifies every call with the Standard
// Webhooks Go library: the signature verifies, webhook-id is the run id on
// every attempt, and a tampered body or another secret does not verify.
func TestHTTPSigned(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(testSigningSecret)
	if err != nil {
		t.Fatal(err)
	}
	other, err := standardwebhooks.NewWebhook("whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		id        string
		verified  error
		tampered  error
		otherKey  error
		headerSet bool
	}
	calls := make(chan seen, 2)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		calls <- seen{
			id:        r.Header.Get("webhook-id"),
			verified:  wh.Verify(body, r.Header),
			tampered:  wh.Verify(append(body, ' '), r.Header),
			otherKey:  other.Verify(body, r.Header),
			headerSet: r.Header.Get("webhook-timestamp") != "",
		}
		w.WriteHeader(http.StatusOK)
	})
	signer, err := NewSigner(testSigningSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Signer: signer})
	req := testRequest()
	for attempt := 1; attempt <= 2; attempt++ {
		req.Attempt = attempt
		if _, err := h.Call(t.Context(), req); err != nil {
			t.Fatalf("call %d: %v", attempt, err)
		}
		c := <-calls
		if c.id != req.RunID.String() || !c.headerSet {
			t.Errorf("attempt %d: webhook-id %q, want the run id %s (timestamp set: %v)", attempt, c.id, req.RunID, c.headerSet)
		}
		if c.verified != nil {
			t.Errorf("attempt %d: the library does not verify the call: %v", attempt, c.verified)
		}
		if c.tampered == nil || c.otherKey == nil {
			t.Errorf("attempt %d: a tampered body (%v) or another secret (%v) verifies", attempt, c.tampered, c.otherKey)
		}
	}
}

// TestHTTPSigningHeadersReserved refuses a configured header that a
// signing target sets itself.
func TestHTTPSigningHeadersReserved(t *testing.T) {
	t.Parallel()
	signer, err := NewSigner(testSigningSecret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:9/x", Signer: signer, Headers: map[string]string{"webhook-signature": "v1,x"}}); err == nil {
		t.Error("a webhook-signature header of a signing target is accepted")
	}
}
