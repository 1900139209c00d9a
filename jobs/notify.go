package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
)

// Notification body formats.
const (
	NotifyFormatStandard = "standard"
	NotifyFormatSlack    = "slack"
)

// NotifyReceiver is one configured receiver of notifications (SPEC §12):
// where they are posted, in which format, signed with which secret, and
// how often and how far apart a notification to it is tried.
type NotifyReceiver struct {
	URL string
	// Key names the receiver in the jobs of its notifications and in its
	// queue (converge.NotifyReceiverKey of URL and Format); NewService
	// sets it.
	Key string
	// Format is NotifyFormatStandard or NotifyFormatSlack.
	Format string
	// On are the notification types it wants.
	On []string
	// Signer, when set, signs every notification (Standard Webhooks).
	// webhook-id (the notification's id, the same on every retry) and
	// webhook-timestamp are sent either way.
	Signer *target.Signer
	// MaxAttempts and Backoff bound the retries (the kinds' defaults);
	// after the last attempt the notification counts failed.
	MaxAttempts int
	Backoff     converge.Backoff
	// Timeout bounds one call.
	Timeout time.Duration
}

// Route is what the store needs of the receiver.
func (r NotifyReceiver) Route() converge.NotifyRoute {
	return converge.NotifyRoute{Key: r.Key, Shown: shownURL(r.URL), On: r.On, MaxAttempts: r.MaxAttempts}
}

// notifyKeysSet gives each receiver its key: the hash of its URL and
// format, told apart from the receivers before it with the same two by
// its rank among them.
func notifyKeysSet(receivers []NotifyReceiver) {
	seen := map[[2]string]int{}
	for i := range receivers {
		r := &receivers[i]
		id := [2]string{r.URL, r.Format}
		r.Key = converge.NotifyReceiverKey(r.URL, r.Format, seen[id])
		seen[id]++
	}
}

// NotifyWorker sends notifications, each a River job of the notification
// queue: at each attempt it asks the store whether the subject is still
// as notified (obsolete otherwise: not sent), then posts the body. A
// receiver that is down costs only this queue's workers: runs never wait
// for a notification.
type NotifyWorker struct {
	river.WorkerDefaults[converge.NotificationArgs]
	store *store.Store
	// receivers are the configured receivers by key.
	receivers map[string]*NotifyReceiver
	// dashboard is the base URL of the dashboard's links, without a
	// trailing slash.
	dashboard string
	client    *http.Client
	metrics   *telemetry.Metrics
	logger    *slog.Logger
	// retryAfter holds, by job id, the Retry-After a receiver answered the
	// attempt that just failed with, from Work until River asks NextRetry
	// for that job's next attempt (in this process, right after Work).
	retryAfter sync.Map
}

// notifyClient posts notifications: no redirects followed (a receiver's
// URL may carry its credential), pooled connections.
var notifyClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// receiver returns the receiver of job, by its key, or nil when the
// configuration no longer has it.
func (w *NotifyWorker) receiver(job *river.Job[converge.NotificationArgs]) *NotifyReceiver {
	return w.receivers[job.Args.Receiver]
}

// NextRetry spaces the attempts with the receiver's backoff, never sooner
// than the Retry-After the receiver answered the failed attempt with (at
// most the backoff's max_retry_after), as for a target (SPEC §5, §6): a
// chat webhook that limits its callers says when to come back.
func (w *NotifyWorker) NextRetry(job *river.Job[converge.NotificationArgs]) time.Time {
	b := converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}
	if r := w.receiver(job); r != nil {
		b = r.Backoff
	}
	var retryAfter time.Duration
	if v, ok := w.retryAfter.LoadAndDelete(job.ID); ok {
		retryAfter = v.(time.Duration)
	}
	return time.Now().Add(b.Delay(job.Attempt, retryAfter))
}

// Timeout bounds one attempt: the call's timeout and the read of its
// subject.
func (w *NotifyWorker) Timeout(job *river.Job[converge.NotificationArgs]) time.Duration {
	if r := w.receiver(job); r != nil && r.Timeout > 0 {
		return r.Timeout + 10*time.Second
	}
	return time.Minute
}

// Work tries one notification once.
func (w *NotifyWorker) Work(ctx context.Context, job *river.Job[converge.NotificationArgs]) error {
	n := job.Args
	log := w.logger.With("notification_id", n.ID, "type", n.Type, "attempt", job.Attempt)
	r := w.receiver(job)
	if r == nil {
		// The configuration changed since it was enqueued.
		w.dropped(n)
		return river.JobCancel(fmt.Errorf("receiver %s (%s) is no longer configured", n.ReceiverURL, n.Receiver))
	}
	err := w.send(ctx, r, n)
	switch {
	case errors.Is(err, errObsolete):
		log.Info("notification obsolete: its subject moved on")
		w.metrics.NotificationFinished("obsolete")
		return nil
	case err == nil:
		w.metrics.NotificationFinished("sent")
		return nil
	case job.Attempt >= job.MaxAttempts:
		log.Warn("notification failed after its last attempt", "error", err)
		w.metrics.NotificationFinished("failed")
		return err
	default:
		var re *receiverError
		if errors.As(err, &re) && re.retryAfter > 0 {
			w.retryAfter.Store(job.ID, re.retryAfter)
		}
		log.Info("notification not delivered; retrying", "error", err)
		return err
	}
}

// receiverError is a receiver's answer other than 2xx, with the delay its
// Retry-After header asked for (0 without one).
type receiverError struct {
	url        string
	status     int
	retryAfter time.Duration
}

func (e *receiverError) Error() string {
	return fmt.Sprintf("notify %s: status %d", e.url, e.status)
}

// dropped logs and counts notification n given up because its receiver
// is no longer configured: failed (SPEC §12 counts obsolete only a
// notification whose subject moved on; this one was due and is not
// delivered).
func (w *NotifyWorker) dropped(n converge.NotificationArgs) {
	shown := n.ReceiverURL
	if shown == "" {
		shown = "(receiver of an older version's job)"
	}
	w.logger.Warn("notification dropped: its receiver is no longer configured", "notification_id", n.ID, "type", n.Type,
		"receiver", shown, "receiver_key", n.Receiver)
	w.metrics.NotificationFinished("failed")
}

// dropUnrouted cancels the notifications queued for receivers the
// configuration no longer has (their queues have no worker), logging and
// counting each (dropped). A process that sends no notifications leaves
// them: another process may.
func (w *NotifyWorker) dropUnrouted(ctx context.Context) {
	if len(w.receivers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gone, err := w.store.NotificationsUnroutedCancel(ctx)
	for _, n := range gone {
		w.dropped(n)
	}
	if err != nil {
		w.logger.Warn("cannot drop the notifications of receivers no longer configured; trying at the next start", "error", err)
	}
}

// errObsolete is send's answer for a notification whose subject moved on.
var errObsolete = errors.New("notification obsolete")

// send posts notification n to r unless it is obsolete.
func (w *NotifyWorker) send(ctx context.Context, r *NotifyReceiver, n converge.NotificationArgs) error {
	current, err := w.store.NotificationCurrent(ctx, n)
	if err != nil {
		return err
	}
	if !current {
		return errObsolete
	}
	body, err := NotificationBody(r.Format, n, w.dashboard)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, max(r.Timeout, time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, r.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify %s: %w", shownURL(r.URL), err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "converge")
	// webhook-id (the notification's id, the same on every retry) and
	// webhook-timestamp are sent signed or not, so that an unsigned
	// receiver can still drop a retry it has seen (SPEC §12).
	if now := time.Now(); r.Signer != nil {
		r.Signer.Sign(req.Header, n.ID.String(), now, body)
	} else {
		req.Header.Set(target.HeaderWebhookID, n.ID.String())
		req.Header.Set(target.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a credential
		}
		return fmt.Errorf("notify %s: %w", shownURL(r.URL), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &receiverError{url: shownURL(r.URL), status: resp.StatusCode,
			retryAfter: target.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	return nil
}

// shownURL is a receiver's URL as shown in logs and errors: scheme and
// host only (a chat webhook's path is its credential).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(receiver)"
	}
	return u.Scheme + "://" + u.Host
}

// NotificationURL is the dashboard page of a notification's subject: the
// dead letter's or workflow run's page, or the stream's page for run.held
// and stream.quarantined. dashboard is the dashboard's base URL.
func NotificationURL(dashboard string, n converge.NotificationArgs) string {
	base := strings.TrimRight(dashboard, "/") + "/ui"
	switch n.Type {
	case converge.NotifyDeadLetterCreated:
		return base + "/dead-letters/" + n.Subject.ID.String()
	case converge.NotifyWorkflowRunFailed:
		return base + "/workflow-runs/" + n.Subject.ID.String()
	default:
		// Resource keys hold only characters that are safe in a path.
		return base + "/streams/" + url.PathEscape(n.Subject.Kind) + "/" + n.Subject.Resource
	}
}

// standardBody is the body of a notification in the standard format.
type standardBody struct {
	Type      string       `json:"type"`
	Timestamp time.Time    `json:"timestamp"`
	Data      standardData `json:"data"`
}

type standardData struct {
	Kind          string     `json:"kind"`
	Resource      string     `json:"resource"`
	Version       int64      `json:"version"`
	ID            string     `json:"id"`
	URL           string     `json:"url"`
	Workflow      string     `json:"workflow,omitempty"`
	Step          string     `json:"step,omitempty"`
	RunID         string     `json:"run_id,omitempty"`
	EventID       string     `json:"event_id,omitempty"`
	Hold          []string   `json:"hold,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Error         string     `json:"error,omitempty"`
	QuarantinedAt *time.Time `json:"quarantined_at,omitempty"`
}

// NotificationBody is the JSON posted for notification n in format
// (standard or slack), its links to the dashboard at dashboard.
func NotificationBody(format string, n converge.NotificationArgs, dashboard string) ([]byte, error) {
	s := n.Subject
	link := NotificationURL(dashboard, n)
	if format == NotifyFormatSlack {
		return json.Marshal(map[string]string{"text": slackText(n, link)})
	}
	d := standardData{Kind: s.Kind, Resource: s.Resource, Version: s.Version, ID: s.ID.String(), URL: link,
		Workflow: s.Workflow, Step: s.Step, Hold: s.Hold, Reason: s.Reason, Error: s.Error, QuarantinedAt: s.QuarantinedAt}
	if s.RunID != nil {
		d.RunID = s.RunID.String()
	}
	if s.EventID != nil {
		d.EventID = s.EventID.String()
	}
	return json.Marshal(standardBody{Type: n.Type, Timestamp: n.At.UTC(), Data: d})
}

// slackText is the one readable line of a notification for a chat.
func slackText(n converge.NotificationArgs, link string) string {
	s := n.Subject
	stream := fmt.Sprintf("%s %s@%d", s.Kind, s.Resource, s.Version)
	var line string
	switch n.Type {
	case converge.NotifyDeadLetterCreated:
		line = fmt.Sprintf("Dead letter: %s failed (%s)", stream, strings.ReplaceAll(s.Reason, "_", " "))
		if s.Error != "" {
			line += ": " + excerpt(s.Error, 200)
		}
	case converge.NotifyWorkflowRunFailed:
		step := s.Step
		if step == "" {
			step = s.Kind // a notification enqueued before subjects named the step
		}
		line = fmt.Sprintf("Workflow run failed: %s %s@%d (step %s)", s.Workflow, s.Resource, s.Version, step)
	case converge.NotifyRunHeld:
		line = fmt.Sprintf("Run held for %s: %s", strings.Join(s.Hold, " and "), stream)
	case converge.NotifyStreamQuarantined:
		line = fmt.Sprintf("Stream quarantined: %s %s after repeated failures (version %d)", s.Kind, s.Resource, s.Version)
	default:
		line = n.Type + ": " + stream
	}
	return line + " " + link
}

// excerpt cuts s to n bytes of one line.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
