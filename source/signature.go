package source

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/converge-run/converge"
)

// ErrBadSignature is returned for a missing, malformed or wrong
// signature, or a webhook-timestamp too far from now.
var ErrBadSignature = &converge.AppError{Code: converge.EBADSIGNATURE, Message: "the signature is missing or does not verify"}

// Tolerance is how far a Standard Webhooks webhook-timestamp may be from
// now, either way.
const Tolerance = 5 * time.Minute

// VerifyGitHub checks GitHub's X-Hub-Signature-256 header: "sha256=" and
// the hex HMAC-SHA256 of body with secret, compared in constant time.
func VerifyGitHub(secret []byte, header string, body []byte) error {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return ErrBadSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return ErrBadSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}

// SignGitHub returns the X-Hub-Signature-256 value GitHub sends for body.
func SignGitHub(secret []byte, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// StandardKey returns the HMAC key of a Standard Webhooks secret: the
// base64 after "whsec_" (a secret without the prefix is taken as base64
// too, as the reference libraries do).
func StandardKey(secret string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
}

// VerifyStandard checks a Standard Webhooks signature: webhook-signature
// is a space-separated list of "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>", one of which must match (constant time), and
// webhook-timestamp (Unix seconds) must be within Tolerance of now.
func VerifyStandard(key []byte, id, timestamp, signatures string, body []byte, now time.Time) error {
	if id == "" || timestamp == "" || signatures == "" {
		return ErrBadSignature
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return ErrBadSignature
	}
	want := standardMAC(key, id, timestamp, body)
	for _, s := range strings.Fields(signatures) {
		b64, ok := strings.CutPrefix(s, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrBadSignature
}

// SignStandard returns the webhook-signature value for a message.
func SignStandard(key []byte, id, timestamp string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id, timestamp, body))
}

func standardMAC(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return mac.Sum(nil)
}
