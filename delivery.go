package converge

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Event sources (SPEC §12): a source posts its own format to
// /hooks/{source}; its rules turn each delivery into events or workflow
// runs. The types here are the vocabulary shared by config, source, store
// and api.

// Source types.
const (
	SourceGitHub      = "github"
	SourceCloudEvents = "cloudevents"
	SourceWebhook     = "webhook"
)

// SourceDef is a configured event source: its type, the secret its
// signatures are made with, and its rules in order.
type SourceDef struct {
	Name   string
	Type   string
	Secret string
	Rules  []SourceRule
	// BearerToken authenticates a CloudEvents source's deliveries with a
	// bearer token of role submitter instead of a signature (Secret is
	// then unused).
	BearerToken bool
}

// SourceRule maps a delivery to one event (Kind) or workflow run
// (Workflow). When, Resource, Version and Payload are CEL expressions over
// body and headers; Version may be the word auto, When empty (always) and
// Payload empty ({}).
type SourceRule struct {
	When     string
	Kind     string
	Workflow string
	Resource string
	Version  string
	Payload  string
}

// VersionAuto is the Version of a rule whose version the accept
// transaction assigns: the stream's highest accepted + 1.
const VersionAuto = "auto"

// DeliveryStatus is what became of a delivery.
type DeliveryStatus string

// Delivery statuses.
const (
	DeliveryAccepted DeliveryStatus = "accepted"
	DeliveryIgnored  DeliveryStatus = "ignored"
	DeliveryRejected DeliveryStatus = "rejected"
)

// Delivery is one request a source posted, identified by the source's own
// delivery id.
type Delivery struct {
	ID             uuid.UUID       `json:"id"`
	Source         string          `json:"source"`
	DeliveryID     string          `json:"delivery_id"`
	ReceivedAt     time.Time       `json:"received_at"`
	Status         DeliveryStatus  `json:"status"`
	MatchedRules   []int           `json:"matched_rules"`
	EventIDs       []uuid.UUID     `json:"event_ids"`
	WorkflowRunIDs []uuid.UUID     `json:"workflow_run_ids"`
	Error          json.RawMessage `json:"error,omitempty"`
}

// DeliveryOutcome is what one matching rule's event or workflow run came to.
type DeliveryOutcome string

// Delivery outcomes.
const (
	OutcomeAccepted        DeliveryOutcome = "accepted"
	OutcomeReplay          DeliveryOutcome = "replay"
	OutcomeStaleVersion    DeliveryOutcome = "stale-version"
	OutcomeVersionConflict DeliveryOutcome = "version-conflict"
)

// DeliveryRuleResult is the answer for one matching rule.
type DeliveryRuleResult struct {
	Rule        int
	Outcome     DeliveryOutcome
	Event       *Event
	WorkflowRun *WorkflowRun
	// Kind is the kind of the rule's event, "" for a rule that starts a
	// workflow (and on a replay): what its stale-version or
	// version-conflict outcome is counted under.
	Kind string
}

// DeliveryResult is the answer to a delivery. Replay is set when the
// delivery had been accepted or ignored before: nothing was written and
// Accepted is the first answer's (its events and workflow runs as they are
// now, or only its rules and outcomes when Answer is set).
type DeliveryResult struct {
	Delivery *Delivery
	Accepted []DeliveryRuleResult
	Replay   bool
	// Answer is the body of the delivery's first answer as it was sent,
	// kept with the delivery row: on the first answer, the body to send;
	// on a replay, the body to send again, byte for byte. Nil when no
	// renderer was given, and on the replay of a delivery recorded before
	// answers were kept (Accepted is then read again).
	Answer []byte
	// RejectedKind is, for a rejected delivery, the kind of the rule
	// whose mapping failed; "" when that rule starts a workflow.
	RejectedKind string
}

// DeliveryListParams filters and pages the deliveries, newest first.
type DeliveryListParams struct {
	Source string
	Status DeliveryStatus
	Cursor *uuid.UUID
	Limit  int
}
