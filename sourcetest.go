package converge

import "encoding/json"

// SourceTest is what a source's rules make of a delivery, evaluated
// without writing anything: `converge source test` and the dashboard's
// delivery page show it.
type SourceTest struct {
	Source string `json:"source"`
	// DeliveryID is the delivery's id as the source gives it ("" for a
	// stored delivery's evaluation, whose id is known).
	DeliveryID string `json:"delivery_id,omitempty"`
	// Status is what the delivery would be: accepted (some rule matches),
	// ignored (none does), rejected (a rule's expression fails: the
	// delivery would be answered 422 mapping-failed). A GitHub ping is a
	// delivery as any other.
	Status string        `json:"status"`
	Rules  []RuleVerdict `json:"rules"`
}

// RuleVerdict is what one rule makes of a delivery: whether it matches,
// and what it would start, or why its expressions fail.
type RuleVerdict struct {
	Rule    int  `json:"rule"`
	Matched bool `json:"matched"`
	// Kind or Workflow is what the rule starts.
	Kind     string `json:"kind,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	Resource string `json:"resource,omitempty"`
	// Version is the mapped version; 0 with VersionAuto when the accept
	// transaction would assign it.
	Version     int64           `json:"version,omitempty"`
	VersionAuto bool            `json:"version_auto,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	// Error is the mapping-failed message of a rule whose expression
	// fails (naming the expression: rules[0].version: ...).
	Error string `json:"error,omitempty"`
}
