package converge_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/converge-run/converge"
)

// TestNotifyReceiverKey: a receiver's key depends on its URL and format
// only, tells apart receivers sharing both by rank, holds nothing of the
// URL, and makes a River queue name that starts with a digit (no kind's
// queue does).
func TestNotifyReceiverKey(t *testing.T) {
	t.Parallel()
	const secretURL = "https://hooks.slack.com/services/T000/B000/XXXX"
	k := converge.NotifyReceiverKey(secretURL, "slack", 0)
	queue := regexp.MustCompile(`^[0-9][a-z0-9]*(?:[_-][a-z0-9]+)*$`) // River's queue names, a digit first
	keys := map[string]bool{k: true}
	for _, other := range []string{
		converge.NotifyReceiverKey(secretURL, "standard", 0),
		converge.NotifyReceiverKey(secretURL+"Y", "slack", 0),
		converge.NotifyReceiverKey(secretURL, "slack", 1),
	} {
		if keys[other] {
			t.Errorf("key %q of another receiver repeats one", other)
		}
		keys[other] = true
	}
	for key := range keys {
		if q := converge.NotificationQueue(key); !queue.MatchString(q) {
			t.Errorf("queue %q is not a River queue name starting with a digit", q)
		}
		for _, part := range []string{"hooks", "slack", "XXXX", "B000"} {
			if strings.Contains(key, part) {
				t.Errorf("key %q holds %q of the URL", key, part)
			}
		}
	}
	if again := converge.NotifyReceiverKey(secretURL, "slack", 0); again != k {
		t.Errorf("key %q, then %q: want it stable", k, again)
	}
}
