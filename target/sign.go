package target

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of the Standard Webhooks scheme (standardwebhooks.com), with
// which converge signs target calls and notifications (SPEC §12).
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// signingHeaders are set by a signing target itself.
var signingHeaders = []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}

// ErrSigningSecret is the error of a secret that is not a Standard
// Webhooks secret. It never holds the secret.
var ErrSigningSecret = errors.New("not a Standard Webhooks secret (whsec_ followed by base64, at least 16 bytes)")

// minSigningKeyBytes is the least key length accepted: the Standard
// Webhooks specification asks for 24 to 64 bytes; 16 bytes still make a
// sound HMAC key and let shorter secrets of other tools be used.
const minSigningKeyBytes = 16

// Signer signs messages with the Standard Webhooks scheme: webhook-id,
// webhook-timestamp (Unix seconds) and webhook-signature "v1,<base64
// HMAC-SHA256 of id.timestamp.body>".
type Signer struct {
	key []byte
}

// NewSigner returns the signer of secret, "whsec_<base64>" (the prefix may
// be left out, as the reference libraries allow).
func NewSigner(secret string) (*Signer, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(secret), "whsec_"))
	if err != nil || len(key) < minSigningKeyBytes {
		return nil, ErrSigningSecret
	}
	return &Signer{key: key}, nil
}

// Signature returns the webhook-signature value of a message.
func (s *Signer) Signature(id string, timestamp time.Time, body []byte) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign sets the three Standard Webhooks headers of a message with id and
// body, sent at timestamp, on h.
func (s *Signer) Sign(h http.Header, id string, timestamp time.Time, body []byte) {
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(timestamp.Unix(), 10))
	h.Set(HeaderWebhookSignature, s.Signature(id, timestamp, body))
}
