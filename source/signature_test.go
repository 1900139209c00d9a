package source_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/converge-run/converge/source"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestStandardAgainstLibrary signs with the Standard Webhooks Go library
// and verifies with ours, and the other way round.
func TestStandardAgainstLibrary(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	key, err := source.StandardKey(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"image.pushed","data":{"n":1}}`)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)

	sig, err := wh.Sign("msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := source.VerifyStandard(key, "msg_1", ts, sig, body, now); err != nil {
		t.Errorf("library signature %q does not verify: %v", sig, err)
	}
	if err := source.VerifyStandard(key, "msg_1", ts, "v1,AAAA "+sig, body, now); err != nil {
		t.Errorf("a list with the library signature does not verify: %v", err)
	}

	ours := source.SignStandard(key, "msg_2", ts, body)
	h := http.Header{}
	h.Set("webhook-id", "msg_2")
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", ours)
	if err := wh.Verify(body, h); err != nil {
		t.Errorf("the library refuses our signature %q: %v", ours, err)
	}
	if source.SignStandard(key, "msg_1", ts, body) != sig {
		t.Errorf("our signature of msg_1 differs from the library's %q", sig)
	}
}

// TestStandardRefuses lists what VerifyStandard refuses.
func TestStandardRefuses(t *testing.T) {
	t.Parallel()
	key, _ := source.StandardKey(testSecret)
	body := []byte(`{}`)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	good := source.SignStandard(key, "id", ts, body)
	old := strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10)
	future := strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10)
	cases := []struct {
		name, id, ts, sig string
		body              []byte
	}{
		{"tampered body", "id", ts, good, []byte(`{"a":1}`)},
		{"other id", "id2", ts, good, body},
		{"missing signature", "id", ts, "", body},
		{"missing id", "", ts, good, body},
		{"timestamp 6 minutes old", "id", old, source.SignStandard(key, "id", old, body), body},
		{"timestamp 6 minutes ahead", "id", future, source.SignStandard(key, "id", future, body), body},
		{"not a timestamp", "id", "soon", good, body},
		{"v2 scheme", "id", ts, "v2," + good[3:], body},
		{"not base64", "id", ts, "v1,!!!", body},
		{"wrong key", "id", ts, source.SignStandard([]byte("other"), "id", ts, body), body},
	}
	for _, c := range cases {
		if err := source.VerifyStandard(key, c.id, c.ts, c.sig, c.body, now); !errors.Is(err, source.ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", c.name, err)
		}
	}
}

// TestGitHubSignature checks X-Hub-Signature-256 against GitHub's
// documented example (docs.github.com, "Validating webhook deliveries":
// secret "It's a Secret to Everybody", payload "Hello, World!").
func TestGitHubSignature(t *testing.T) {
	t.Parallel()
	secret := []byte("It's a Secret to Everybody")
	body := []byte("Hello, World!")
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := source.SignGitHub(secret, body); got != want {
		t.Errorf("SignGitHub = %s, want GitHub's %s", got, want)
	}
	if err := source.VerifyGitHub(secret, want, body); err != nil {
		t.Errorf("GitHub's example does not verify: %v", err)
	}
	for name, header := range map[string]string{
		"missing": "", "sha1": "sha1=" + want[7:], "not hex": "sha256=zz", "tampered": want[:len(want)-1] + "8",
	} {
		if err := source.VerifyGitHub(secret, header, body); !errors.Is(err, source.ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", name, err)
		}
	}
	if err := source.VerifyGitHub([]byte("wrong"), want, body); !errors.Is(err, source.ErrBadSignature) {
		t.Errorf("wrong secret: err = %v", err)
	}
}
