package target

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	const (
		ok   = converge.ErrorClass("")
		tr   = converge.ClassTransient
		perm = converge.ClassPermanent
	)
	tests := []struct {
		status    int
		transient []int
		permanent []int
		want      converge.ErrorClass
	}{
		{status: 200, want: ok},
		{status: 201, want: ok},
		{status: 204, want: ok},
		{status: 299, want: ok},
		{status: 101, want: perm},
		{status: 301, want: perm},
		{status: 302, want: perm},
		{status: 400, want: perm},
		{status: 401, want: perm},
		{status: 403, want: perm},
		{status: 404, want: perm},
		{status: 409, want: perm},
		{status: 422, want: perm},
		{status: 408, want: tr},
		{status: 425, want: tr},
		{status: 429, want: tr},
		{status: 500, want: tr},
		{status: 502, want: tr},
		{status: 503, want: tr},
		{status: 504, want: tr},
		{status: 599, want: tr},
		{status: 404, transient: []int{404}, want: tr},
		{status: 409, transient: []int{409, 423}, want: tr},
		{status: 503, permanent: []int{501, 503}, want: perm},
		{status: 429, permanent: []int{429}, want: perm},
		{status: 202, transient: []int{202}, want: tr},
		{status: 200, permanent: []int{204}, want: ok},
		{status: 204, permanent: []int{204}, want: perm},
		{status: 500, transient: []int{500}, permanent: []int{500}, want: perm},
		{status: 418, transient: []int{500}, permanent: []int{503}, want: perm},
	}
	for _, tt := range tests {
		if got := Classify(tt.status, tt.transient, tt.permanent); got != tt.want {
			t.Errorf("Classify(%d, %v, %v) = %q, want %q", tt.status, tt.transient, tt.permanent, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"86400", 24 * time.Hour},
		{"-5", 0},
		{"1.5", 0},
		{"12abc", 0},
		{"soon", 0},
		{"99999999999999999999999", math.MaxInt64},
		{"9223372036854775807", math.MaxInt64},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"Fri, 14 Mar 2025 12:00:30 GMT", 30 * time.Second},
		{"Friday, 14-Mar-25 12:01:00 GMT", time.Minute}, // RFC 850
		{"Fri Mar 14 12:00:10 2025", 10 * time.Second},  // ANSI C asctime
		{"Fri, 14 Mar 2025 12:00:30 +0000", 0},          // not an HTTP date
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", tt.header, got, tt.want)
		}
	}
}
