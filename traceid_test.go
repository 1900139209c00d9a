package converge

import "testing"

func TestTraceIDOf(t *testing.T) {
	t.Parallel()
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "", // the invalid all-zero id
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "", // upper case is not W3C
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":  "", // short
		"": "",
	} {
		if got := TraceIDOf(tp); got != want {
			t.Errorf("TraceIDOf(%q) = %q, want %q", tp, got, want)
		}
	}
}
