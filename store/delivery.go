package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// Recording a source's delivery (SPEC §12): load (insert the delivery row,
// or find and lock the one of the same delivery id) → an accepted or
// ignored delivery is answered with its first answer; otherwise each
// matching rule's event or workflow run is accepted, each in a savepoint
// of the delivery's transaction, and the row is written with what came of
// them. One transaction per delivery.

// DeliveryItem is what one matching rule starts: exactly one of Event and
// Workflow. A Version of 0 is `version: auto`.
type DeliveryItem struct {
	Rule     int
	Event    *EventAcceptParams
	Workflow *WorkflowRunStartParams
}

// DeliveryRecordParams is a delivery to record: its source and the
// source's id of it, and either what its matching rules start (Items, none
// when no rule matched) or the mapping-failed error of a rule (Failure).
type DeliveryRecordParams struct {
	Source     string
	DeliveryID string
	Items      []DeliveryItem
	Failure    *converge.AppError
	// FailureKind is the kind of the rule whose mapping failed (Failure),
	// "" for a rule that starts a workflow: the result's RejectedKind.
	FailureKind string
	// Body and Headers are what the rules were evaluated on (the parsed
	// body as JSON, the headers without credentials), kept with the
	// delivery for its dashboard page (delivery_body.go).
	Body    []byte
	Headers map[string]string
	// Answer, when set, renders the answer to the delivery (the body of
	// the API's 202) in the delivery's transaction: the bytes are kept
	// with the row (answer_body, migration 000015) and returned as the
	// result's Answer, so that the delivery sent again is answered with
	// exactly them. It is not called for a rejected delivery.
	Answer func(*converge.DeliveryResult) ([]byte, error)
}

// answerItem is one rule's outcome as the answer column stores it.
type answerItem struct {
	Rule          int                      `json:"rule"`
	Outcome       converge.DeliveryOutcome `json:"outcome"`
	EventID       *uuid.UUID               `json:"event_id,omitempty"`
	WorkflowRunID *uuid.UUID               `json:"workflow_run_id,omitempty"`
}

const deliveryColumns = `d.id, d.source, d.delivery_id, d.received_at, d.status, d.matched_rules, d.event_ids, d.workflow_run_ids, d.error`

func scanDelivery(row pgx.Row) (*converge.Delivery, error) {
	var d converge.Delivery
	var rules []int32
	var events, wfs [][16]byte
	var errJSON []byte
	if err := row.Scan(&d.ID, &d.Source, &d.DeliveryID, &d.ReceivedAt, &d.Status, &rules, &events, &wfs, &errJSON); err != nil {
		return nil, err
	}
	d.ReceivedAt = d.ReceivedAt.UTC()
	d.MatchedRules = make([]int, len(rules))
	for i, r := range rules {
		d.MatchedRules[i] = int(r)
	}
	d.EventIDs = make([]uuid.UUID, len(events))
	for i, id := range events {
		d.EventIDs[i] = id
	}
	d.WorkflowRunIDs = make([]uuid.UUID, len(wfs))
	for i, id := range wfs {
		d.WorkflowRunIDs[i] = id
	}
	if errJSON != nil {
		d.Error = errJSON
	}
	return &d, nil
}

// DeliveryRecord records a delivery and accepts what its matching rules
// start, all in one transaction. A delivery accepted or ignored before is
// answered with its first answer (Replay set, nothing written), also when
// two copies arrive at once: the second waits on the first's unique key.
// A rejected one is evaluated again. A rule whose event or workflow run is
// stale or conflicting has that outcome; the others are still accepted. A
// rule whose stream is not a valid key (or whose payload PostgreSQL
// refuses) rejects the delivery as mapping-failed: only the delivery row
// is written, and the result's delivery is rejected.
func (s *Store) DeliveryRecord(ctx context.Context, p DeliveryRecordParams) (*converge.DeliveryResult, error) {
	var res *converge.DeliveryResult
	var wfs []workflowStatus
	var tally acceptTally
	// Rules accept events of several streams, not in the lock order: a
	// deadlock is run again (inTxRetry).
	err := s.inTxRetry(ctx, func(tx pgx.Tx) error {
		wfs, tally = nil, acceptTally{} // of a try that failed
		var err error
		res, err = s.deliveryRecordTx(ctx, tx, &tally, p)
		if err == nil && len(p.Items) > 0 { // its events may supersede workflow steps
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record delivery %s/%s: %w", p.Source, p.DeliveryID, err)
	}
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return res, nil
}

// deliveryRecordTx is DeliveryRecord in tx; what its rules' accepts
// supersede is noted in t (and rolled back with their savepoints).
func (s *Store) deliveryRecordTx(ctx context.Context, tx pgx.Tx, t *acceptTally, p DeliveryRecordParams) (*converge.DeliveryResult, error) {
	// Load: insert the row, or wait for and lock the existing one.
	id := newID()
	var inserted uuid.UUID
	body, headers := deliveryContent(p)
	err := tx.QueryRow(ctx, `INSERT INTO converge_deliveries (id, source, delivery_id, status, body, headers)
		VALUES ($1, $2, $3, 'ignored', $4, $5) ON CONFLICT (source, delivery_id) DO NOTHING RETURNING id`,
		id, p.Source, p.DeliveryID, body, headers).Scan(&inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		var status converge.DeliveryStatus
		var answer []byte
		var answerBody *string
		if err := tx.QueryRow(ctx, `SELECT id, status, answer, answer_body FROM converge_deliveries
			WHERE source = $1 AND delivery_id = $2 FOR UPDATE`, p.Source, p.DeliveryID).Scan(&id, &status, &answer, &answerBody); err != nil {
			return nil, fmt.Errorf("find delivery: %w", err)
		}
		if status != converge.DeliveryRejected {
			return s.deliveryAnswer(ctx, tx, id, answer, answerBody)
		}
		if err := deliveryContentUpdate(ctx, tx, id, body, headers); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("insert delivery: %w", err)
	}

	if p.Failure != nil {
		return s.deliveryReject(ctx, tx, id, p.Failure, p.FailureKind)
	}

	// Accept each rule's event or workflow run in a savepoint of its own
	// (a stale one is an outcome, not the end), inside one of all of
	// them (an invalid one rejects the whole delivery).
	all, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	allMark := t.mark()
	answer := make([]answerItem, 0, len(p.Items))
	results := make([]converge.DeliveryRuleResult, 0, len(p.Items))
	for _, it := range p.Items {
		r, err := s.deliveryItem(ctx, all, t, it)
		var appErr *converge.AppError
		if errors.As(err, &appErr) && appErr.Code == converge.EINVALID {
			if rerr := all.Rollback(ctx); rerr != nil {
				return nil, fmt.Errorf("roll back to savepoint: %w", rerr)
			}
			t.rollback(allMark)
			f := fmt.Sprintf("rules[%d]", it.Rule)
			return s.deliveryReject(ctx, tx, id, &converge.AppError{Code: converge.EMAPPINGFAILED,
				Message: f + ": " + appErr.Message, Fields: []converge.FieldError{{Field: f, Message: appErr.Message}}}, it.kind())
		}
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", it.Rule, err)
		}
		results = append(results, *r)
		a := answerItem{Rule: r.Rule, Outcome: r.Outcome}
		if r.Event != nil {
			a.EventID = &r.Event.ID
		}
		if r.WorkflowRun != nil {
			a.WorkflowRunID = &r.WorkflowRun.ID
		}
		answer = append(answer, a)
	}
	if err := all.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}

	// Write the delivery row.
	status := converge.DeliveryIgnored
	if len(p.Items) > 0 {
		status = converge.DeliveryAccepted
	}
	rules := []int32{}
	var events, wfs []uuid.UUID
	for _, a := range answer {
		rules = append(rules, int32(a.Rule))
		if a.EventID != nil {
			events = append(events, *a.EventID)
		}
		if a.WorkflowRunID != nil {
			wfs = append(wfs, *a.WorkflowRunID)
		}
	}
	ans, err := json.Marshal(answer)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE converge_deliveries d SET status = $2, matched_rules = $3,
		event_ids = $4, workflow_run_ids = $5, answer = $6, error = NULL, received_at = now()
		WHERE id = $1 RETURNING `+deliveryColumns, id, string(status), rules, uuids(events), uuids(wfs), ans))
	if err != nil {
		return nil, fmt.Errorf("write delivery: %w", err)
	}
	res := &converge.DeliveryResult{Delivery: d, Accepted: results}
	if p.Answer != nil {
		if res.Answer, err = p.Answer(res); err != nil {
			return nil, fmt.Errorf("render answer: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE converge_deliveries SET answer_body = $2 WHERE id = $1`, id, string(res.Answer)); err != nil {
			return nil, fmt.Errorf("write delivery answer: %w", err)
		}
	}
	return res, nil
}

// kind is the kind of the item's event, "" for a workflow run.
func (it DeliveryItem) kind() string {
	if it.Event != nil {
		return it.Event.Kind
	}
	return ""
}

// deliveryReject writes the delivery as rejected with the mapping error
// of a rule of kind (its RejectedKind).
func (s *Store) deliveryReject(ctx context.Context, tx pgx.Tx, id uuid.UUID, failure *converge.AppError, kind string) (*converge.DeliveryResult, error) {
	problem, err := json.Marshal(map[string]any{"type": "urn:converge:problem:" + failure.Code, "detail": failure.Message, "errors": failure.Fields})
	if err != nil {
		return nil, fmt.Errorf("encode error: %w", err)
	}
	d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE converge_deliveries d SET status = 'rejected', matched_rules = '{}',
		event_ids = '{}', workflow_run_ids = '{}', answer = '[]', answer_body = NULL, error = $2, received_at = now()
		WHERE id = $1 RETURNING `+deliveryColumns, id, problem))
	if err != nil {
		return nil, fmt.Errorf("write rejected delivery: %w", err)
	}
	return &converge.DeliveryResult{Delivery: d, Accepted: []converge.DeliveryRuleResult{}, RejectedKind: kind}, nil
}

// deliveryAnswer is the answer of an accepted or ignored delivery sent
// again: its row and first answer, the bytes first sent when they were
// kept (answerBody), else its events and workflow runs as they are now.
func (s *Store) deliveryAnswer(ctx context.Context, tx pgx.Tx, id uuid.UUID, answer []byte, answerBody *string) (*converge.DeliveryResult, error) {
	d, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM converge_deliveries d WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get delivery: %w", err)
	}
	var items []answerItem
	if err := json.Unmarshal(answer, &items); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	res := &converge.DeliveryResult{Delivery: d, Accepted: make([]converge.DeliveryRuleResult, 0, len(items)), Replay: true}
	if answerBody != nil {
		res.Answer = []byte(*answerBody)
		for _, a := range items {
			res.Accepted = append(res.Accepted, converge.DeliveryRuleResult{Rule: a.Rule, Outcome: a.Outcome})
		}
		return res, nil
	}
	for _, a := range items {
		r := converge.DeliveryRuleResult{Rule: a.Rule, Outcome: a.Outcome}
		if a.EventID != nil {
			if r.Event, err = s.eventGet(ctx, tx, *a.EventID, false); err != nil {
				return nil, err
			}
		}
		if a.WorkflowRunID != nil {
			if r.WorkflowRun, err = workflowRunGet(ctx, tx, *a.WorkflowRunID); err != nil {
				return nil, err
			}
		}
		res.Accepted = append(res.Accepted, r)
	}
	return res, nil
}

// deliveryItem accepts one rule's event or workflow run in a savepoint of
// tx: a stale version or a version conflict is rolled back (with what it
// noted in t) and answered as that outcome.
func (s *Store) deliveryItem(ctx context.Context, tx pgx.Tx, t *acceptTally, it DeliveryItem) (*converge.DeliveryRuleResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	mark := t.mark()
	r := &converge.DeliveryRuleResult{Rule: it.Rule, Outcome: converge.OutcomeAccepted, Kind: it.kind()}
	if it.Event != nil {
		err = s.deliveryEvent(ctx, sp, t, *it.Event, r)
	} else {
		err = s.deliveryWorkflow(ctx, sp, t, *it.Workflow, r)
	}
	var appErr *converge.AppError
	if errors.As(err, &appErr) && (appErr.Code == converge.ESTALEVERSION || appErr.Code == converge.EVERSIONCONFLICT) {
		if err := sp.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("roll back to savepoint: %w", err)
		}
		t.rollback(mark)
		r.Outcome = converge.OutcomeStaleVersion
		if appErr.Code == converge.EVERSIONCONFLICT {
			r.Outcome = converge.OutcomeVersionConflict
		}
		r.Event, r.WorkflowRun = nil, nil
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return r, nil
}

// errAutoVersionSpent is version auto's answer for a stream already at the
// greatest version there is: no positive 64-bit integer is above it, so the
// rule's mapping fails (SPEC §12) rather than overflowing.
func errAutoVersionSpent() error {
	return &converge.AppError{Code: converge.EINVALID,
		Message: "version: auto: a stream is at the greatest version, " + strconv.FormatInt(math.MaxInt64, 10)}
}

// deliveryEvent accepts a rule's event; version auto is the stream's
// latest + 1, read under the stream's row lock, which the accept then
// keeps until commit.
func (s *Store) deliveryEvent(ctx context.Context, tx pgx.Tx, t *acceptTally, p EventAcceptParams, r *converge.DeliveryRuleResult) error {
	if err := converge.ValidateResource(p.Resource); err != nil {
		return &converge.AppError{Code: converge.EINVALID, Message: "resource: " + err.Error()}
	}
	if p.Version == 0 {
		var latest int64
		var quarantined bool
		if err := tx.QueryRow(ctx, upsertStreamSQL(`VALUES ($1, $2, 0)`, ""), p.Kind, p.Resource).Scan(&latest, &quarantined); err != nil {
			return fmt.Errorf("lock stream: %w", err)
		}
		if latest == math.MaxInt64 {
			return errAutoVersionSpent()
		}
		p.Version = latest + 1
	}
	acc, err := s.eventAcceptTx(ctx, tx, t, p)
	if err != nil {
		return err
	}
	r.Event = acc.Event
	if acc.Replay {
		r.Outcome = converge.OutcomeReplay
	}
	return nil
}

// deliveryWorkflow starts a rule's workflow run. Version auto is 1 + the
// greatest of the workflow's highest version for the resource and the
// latest version of every stream its steps resolve to, read under the
// workflow's start lock and the streams' row locks (taken in the lock
// order).
func (s *Store) deliveryWorkflow(ctx context.Context, tx pgx.Tx, t *acceptTally, p WorkflowRunStartParams, r *converge.DeliveryRuleResult) error {
	resources, err := workflowResources(p)
	if err != nil {
		return err
	}
	if len(p.Payload) == 0 {
		p.Payload = json.RawMessage(`{}`)
	}
	def := p.Definition
	if p.Version == 0 {
		if _, err := tx.Exec(ctx, lockWorkflowSQL, def.Name, p.Resource); err != nil {
			return fmt.Errorf("lock workflow %s %s: %w", def.Name, p.Resource, err)
		}
		var highest int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM converge_workflow_runs WHERE workflow = $1 AND resource = $2`,
			def.Name, p.Resource).Scan(&highest); err != nil {
			return fmt.Errorf("look up workflow runs: %w", err)
		}
		steps := slices.Clone(def.Steps)
		slices.SortFunc(steps, func(a, b *converge.WorkflowStep) int {
			return compareStreams(a.Kind, resources[a.Name], b.Kind, resources[b.Name])
		})
		for _, st := range steps {
			var latest int64
			var quarantined bool
			if err := tx.QueryRow(ctx, upsertStreamSQL(`VALUES ($1, $2, 0)`, ""), st.Kind, resources[st.Name]).Scan(&latest, &quarantined); err != nil {
				return fmt.Errorf("lock stream: %w", err)
			}
			highest = max(highest, latest)
		}
		if highest == math.MaxInt64 {
			return errAutoVersionSpent()
		}
		p.Version = highest + 1
	}
	res, err := s.workflowRunStartTx(ctx, tx, t, p, resources)
	if err != nil {
		return err
	}
	r.WorkflowRun = res.WorkflowRun
	if res.Replay {
		r.Outcome = converge.OutcomeReplay
	}
	return nil
}

// DeliveryGet returns a delivery by id.
func (s *Store) DeliveryGet(ctx context.Context, id uuid.UUID) (*converge.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM converge_deliveries d WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.Errorf(converge.ENOTFOUND, "delivery %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get delivery: %w", err)
	}
	return d, nil
}

// DeliveryList returns deliveries newest first and the cursor of the next
// page (nil on the last page).
func (s *Store) DeliveryList(ctx context.Context, p converge.DeliveryListParams) ([]*converge.Delivery, *uuid.UUID, error) {
	rows, err := s.db.Query(ctx, `SELECT `+deliveryColumns+` FROM converge_deliveries d
		WHERE ($1 = '' OR d.source = $1) AND ($2 = '' OR d.status = $2) AND ($3::uuid IS NULL OR d.id < $3)
		ORDER BY d.id DESC LIMIT $4`, p.Source, string(p.Status), p.Cursor, p.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list deliveries: %w", err)
	}
	items, next, err := keysetPage(rows, p.Limit, func(row pgx.CollectableRow) (*converge.Delivery, error) { return scanDelivery(row) },
		func(d *converge.Delivery) uuid.UUID { return d.ID })
	if err != nil {
		return nil, nil, fmt.Errorf("list deliveries: %w", err)
	}
	return items, next, nil
}
