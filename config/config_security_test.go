package config_test

import (
	"strings"
	"testing"

	"github.com/converge-run/converge/config"
)

// TestParseErrorsHideSecrets checks that a value of the wrong type at a key
// that holds credentials (target headers, the database URL) is not quoted
// in the error, not even in part, while the key is still named.
func TestParseErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	const secret = "Bearer cfg-Secret-0123456789"
	cases := []struct {
		name, yaml, key string
	}{
		{"headers not a map", "kinds:\n  build:\n    target:\n      http:\n        url: http://x/\n        headers: \"" + secret + "\"\n",
			"kinds.build.target.http.headers"},
		{"header value not a string", "kinds:\n  build:\n    target:\n      http:\n        url: http://x/\n        headers: {Authorization: [\"" + secret + "\"]}\n",
			"kinds.build.target.http.headers"},
		{"database_url not a string", "database_url: [\"postgres://u:" + secret + "@h/db\"]\n", "database_url"},
		{"second error", "max_payload_bytes: nope\nkinds:\n  build:\n    target:\n      http:\n        url: http://x/\n        headers: \"" + secret + "\"\n",
			"max_payload_bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(c.yaml))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.key) {
				t.Errorf("error %q does not name %s", msg, c.key)
			}
			for _, part := range []string{secret, secret[:7], "cfg-Sec"} {
				if strings.Contains(msg, part) {
					t.Errorf("error %q shows %q", msg, part)
				}
			}
		})
	}
}
