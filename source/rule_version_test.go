package source_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/source"
)

// TestRuleVersionExact: a version is a positive integer below 2^53, the
// range in which a JSON number read as a double is the number sent; past
// it, read directly as a double or converted by int(), it is refused
// naming rules[0].version (2^53 + 1 reads as 2^53 and would be stored
// wrong), as are fractions, zero and negatives.
func TestRuleVersionExact(t *testing.T) {
	t.Parallel()
	set, err := source.Compile([]converge.SourceDef{{Name: "registry", Type: converge.SourceCloudEvents, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		Rules: []converge.SourceRule{
			{Kind: "deploy", Resource: `"staging/app"`, Version: `int(body.data.n)`},
			{Kind: "deploy", Resource: `"staging/app"`, Version: `body.data.n`},
			{Kind: "deploy", Resource: `"staging/app"`, Version: `uint(body.data.n)`},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/cloudevents+json"}}
	cases := []struct {
		n    string
		want int64 // 0: refused by every rule
		msg  string
	}{
		{"1", 1, ""},
		{"9007199254740991", 9007199254740991, ""},
		{"9007199254740992", 0, "over 2^53 - 1"},
		{"9007199254740993", 0, "over 2^53 - 1"},
		{"9007199254740994", 0, "over 2^53 - 1"},
		{"1e300", 0, ""},
		{"0", 0, "not a positive integer"},
		{"-3", 0, ""},
	}
	for _, c := range cases {
		body := fmt.Appendf(nil, `{"specversion": "1.0", "id": "e1", "source": "/r", "type": "t", "data": {"n": %s}}`, c.n)
		res, err := set.Test("registry", h, body)
		if err != nil {
			t.Fatalf("%s: %v", c.n, err)
		}
		for i, v := range res.Rules {
			if i == 2 && strings.HasPrefix(c.n, "-") {
				continue // uint() of a negative fails in CEL itself
			}
			switch {
			case c.want != 0 && (v.Error != "" || v.Version != c.want):
				t.Errorf("%s, rule %d: version %d, error %q; want %d", c.n, i, v.Version, v.Error, c.want)
			case c.want == 0 && !strings.HasPrefix(v.Error, fmt.Sprintf("rules[%d].version: ", i)):
				t.Errorf("%s, rule %d: version %d, error %q; want refused naming rules[%d].version", c.n, i, v.Version, v.Error, i)
			case c.want == 0 && c.msg != "" && !strings.Contains(v.Error, c.msg):
				t.Errorf("%s, rule %d: error %q, want it to say %q", c.n, i, v.Error, c.msg)
			}
		}
		if c.want == 0 && res.Status != string(converge.DeliveryRejected) {
			t.Errorf("%s: status %s, want rejected", c.n, res.Status)
		}
	}
	// A double with a fraction is refused; int() of it truncates in CEL.
	body := []byte(`{"specversion": "1.0", "id": "e1", "source": "/r", "type": "t", "data": {"n": 2.5}}`)
	res, err := set.Test("registry", h, body)
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Rules[1]; !strings.Contains(v.Error, "not a whole number") {
		t.Errorf("2.5 read directly: %+v, want refused as not a whole number", v)
	}
}
