package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// eventKey is one version of one stream.
type eventKey struct {
	resource string
	version  int64
}

// loadClient keeps posting rising versions of its streams and logs every
// answer: the acknowledged events (202 or 200, with the event's id) are
// what the checks hold converge to.
type loadClient struct {
	st      *stack
	kind    string
	streams []*clientStream

	mu sync.Mutex
	// acked are the acknowledged events; posted every version posted.
	acked  map[eventKey]uuid.UUID
	posted map[eventKey]bool
	// statuses counts answers by status (0: no answer).
	statuses map[int]int
	// bare5xx counts 5xx answers without a problem body; refused the
	// answers that are neither success nor a 5xx (a 409 for a rising
	// version is a bug).
	bare5xx int
	refused []string
}

// clientStream is one stream the client drives; its versions rise by one,
// a version not acknowledged is posted again.
type clientStream struct {
	mu       sync.Mutex
	resource string
	next     int64
}

func newLoadClient(st *stack, kind string, streams int) *loadClient {
	c := &loadClient{st: st, kind: kind, acked: map[eventKey]uuid.UUID{}, posted: map[eventKey]bool{}, statuses: map[int]int{}}
	for i := range streams {
		c.streams = append(c.streams, &clientStream{resource: fmt.Sprintf("app/s%02d", i), next: 1})
	}
	return c
}

// run posts with workers goroutines until ctx ends.
func (c *loadClient) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				s := c.streams[rand.N(len(c.streams))]
				if !s.mu.TryLock() {
					continue
				}
				c.post(ctx, s)
				s.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(10*time.Millisecond + rand.N(40*time.Millisecond)):
				}
			}
		})
	}
	wg.Wait()
}

// post posts s's next version once; the caller holds s.mu.
func (c *loadClient) post(ctx context.Context, s *clientStream) {
	k := eventKey{s.resource, s.next}
	c.mu.Lock()
	c.posted[k] = true
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	a, err := c.st.do(rctx, http.MethodPost, "/v1/events", map[string]any{
		"kind": c.kind, "resource": s.resource, "version": s.next, "payload": map[string]any{"v": s.next}})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.statuses[0]++
		return
	}
	c.statuses[a.status]++
	switch {
	case a.status == http.StatusAccepted || a.status == http.StatusOK:
		var body struct {
			Event struct {
				ID uuid.UUID `json:"id"`
			} `json:"event"`
		}
		if json.Unmarshal(a.body, &body) != nil || body.Event.ID == uuid.Nil {
			c.refused = append(c.refused, fmt.Sprintf("%d without an event: %.200s", a.status, a.body))
			return
		}
		c.acked[k] = body.Event.ID
		s.next++
	case a.status >= 500:
		if !isProblem(a) {
			c.bare5xx++
		}
	default:
		c.refused = append(c.refused, fmt.Sprintf("%s@%d: %d %.200s", s.resource, k.version, a.status, a.body))
	}
}

// isProblem reports whether a is an RFC 9457 problem body.
func isProblem(a *answer) bool {
	if !strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
		return false
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	return json.Unmarshal(a.body, &p) == nil && strings.HasPrefix(p.Type, "urn:converge:problem:") && p.Status == a.status
}

// snapshot returns copies of the client's logs.
func (c *loadClient) snapshot() (acked map[eventKey]uuid.UUID, posted map[eventKey]bool, statuses map[int]int, bare5xx int, refused []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	acked = make(map[eventKey]uuid.UUID, len(c.acked))
	for k, v := range c.acked {
		acked[k] = v
	}
	posted = make(map[eventKey]bool, len(c.posted))
	for k, v := range c.posted {
		posted[k] = v
	}
	statuses = make(map[int]int, len(c.statuses))
	for k, v := range c.statuses {
		statuses[k] = v
	}
	return acked, posted, statuses, c.bare5xx, append([]string(nil), c.refused...)
}
