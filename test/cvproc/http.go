package cvproc

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

// WaitHTTP polls GET url until it answers 200 (a converge's /healthz or
// /readyz, say), and fails the test when it has not within timeout.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	testkit.Eventually(t, timeout, func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("GET %s answers %d", url, resp.StatusCode)
	})
}
