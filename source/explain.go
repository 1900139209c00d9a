package source

import (
	"encoding/json"
	"net/http"

	"github.com/converge-run/converge"
)

// Test evaluates the rules of source name on a delivery as Receive would,
// without its signature and without writing anything: which rules match
// and what each would start (`converge source test`). Every rule is
// evaluated, also after one fails (the delivery would then be rejected).
// Errors are Receive's for the body: ENOTFOUND, EUNSUPPORTEDMEDIA,
// EMALFORMED.
func (set *Set) Test(name string, h http.Header, body []byte) (*converge.SourceTest, error) {
	src, ok := set.sources[name]
	if !ok {
		return nil, converge.Errorf(converge.ENOTFOUND, "no source %q", name)
	}
	d, err := src.parse(h, body)
	if err != nil {
		return nil, err
	}
	t := src.explain(d.doc, d.headers)
	t.DeliveryID = d.id
	return t, nil
}

// Explain evaluates the rules of source name on a stored delivery's body
// and headers (store.DeliveryContent): what each rule would start for it
// now, with the rules as configured now.
func (set *Set) Explain(name string, body json.RawMessage, headers map[string]string) (*converge.SourceTest, error) {
	src, ok := set.sources[name]
	if !ok {
		return nil, converge.Errorf(converge.ENOTFOUND, "no source %q is configured", name)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, malformed(err)
	}
	if headers == nil {
		headers = map[string]string{}
	}
	return src.explain(doc, headers), nil
}

// explain evaluates every rule of the source on doc and headers.
func (src *compiledSource) explain(doc any, headers map[string]string) *converge.SourceTest {
	vars := map[string]any{"body": doc, "headers": headers}
	t := &converge.SourceTest{Source: src.def.Name, Status: string(converge.DeliveryIgnored), Rules: make([]converge.RuleVerdict, 0, len(src.rules))}
	rejected := false
	for i, rl := range src.rules {
		v := converge.RuleVerdict{Rule: i, Kind: rl.def.Kind, Workflow: rl.def.Workflow}
		m, err := rl.eval(i, vars)
		switch {
		case err != nil:
			v.Error = err.Error()
			if ae, ok := err.(*converge.AppError); ok {
				v.Error = ae.Message // rules[0].version: ...
			}
			rejected = true
		case m != nil:
			v.Matched = true
			v.Resource, v.Version, v.VersionAuto, v.Payload = m.Resource, m.Version, m.Version == 0, m.Payload
			if t.Status == string(converge.DeliveryIgnored) {
				t.Status = string(converge.DeliveryAccepted)
			}
		}
		t.Rules = append(t.Rules, v)
	}
	if rejected {
		t.Status = string(converge.DeliveryRejected)
	}
	return t
}
