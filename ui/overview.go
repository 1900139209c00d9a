package ui

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

type overviewData struct {
	// Kinds lists a row per kind with its count per status, in
	// converge.RunStatuses order.
	Kinds    []kindRow
	Statuses []converge.RunStatus
	// OpenDeadLetters is the total; OpenByKind per kind.
	OpenDeadLetters int64
	OpenByKind      []store.KindCount
	Chart           chart
	Causes          []cause
	Supersessions   []store.Supersession
	// HeldRuns are runs waiting for approval, newest first, the first
	// heldShown of HeldTotal (all of them, up to heldAll, with ?held=all:
	// AllHeldURL); Quarantined the quarantined streams (SPEC §11).
	HeldRuns    []*converge.Run
	HeldTotal   int64
	AllHeldURL  string
	Quarantined []*converge.Quarantine
}

type kindRow struct {
	Kind   string
	Counts []int64
	Total  int64
}

type cause struct {
	store.FailureCause
	URL string
}

// heldShown is how many runs waiting for approval the overview lists,
// newest first; heldAll how many it lists when asked for all of them.
const (
	heldShown = 50
	heldAll   = 1000
)

// overviewWindow is how far back the overview looks.
const overviewWindow = 24 * time.Hour

func (u *UI) handleOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := u.cfg.Now()
	d := &overviewData{Statuses: converge.RunStatuses}
	counts, err := u.store.DashboardRunCounts(ctx, now.Add(-overviewWindow))
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Kinds = kindRows(u.kinds, counts)
	if d.OpenByKind, err = u.store.DashboardOpenDeadLetters(ctx); err != nil {
		u.serverError(w, r, err)
		return
	}
	for _, c := range d.OpenByKind {
		d.OpenDeadLetters += c.Count
	}
	hours, err := u.store.DashboardDeadLettersPerHour(ctx, now, 24)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Chart = hourChart(hours)
	causes, err := u.store.DashboardFailureCauses(ctx, 10)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	for _, c := range causes {
		q := url.Values{"kind": {c.Kind}}
		if s := searchText(c.Pattern); s != "" {
			q.Set("q", s)
		}
		d.Causes = append(d.Causes, cause{FailureCause: c, URL: "/ui/dead-letters?" + q.Encode()})
	}
	if d.Supersessions, err = u.store.DashboardSupersessions(ctx, 10); err != nil {
		u.serverError(w, r, err)
		return
	}
	limit := heldShown
	if r.URL.Query().Get("held") == "all" {
		limit = heldAll
	}
	if d.HeldRuns, d.HeldTotal, err = u.store.RunHeldList(ctx, limit); err != nil {
		u.serverError(w, r, err)
		return
	}
	if int64(len(d.HeldRuns)) < d.HeldTotal && limit < heldAll {
		d.AllHeldURL = "/ui/?held=all#held"
	}
	if d.Quarantined, err = u.store.QuarantineList(ctx); err != nil {
		u.serverError(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Flash: u.takeFlash(r), Data: d})
}

// kindRows arranges run counts as a table: a row per kind (the configured
// ones first, then any other found), a column per status.
func kindRows(kinds []string, counts []store.KindStatusCount) []kindRow {
	idx := map[string]int{}
	var rows []kindRow
	add := func(k string) int {
		if i, ok := idx[k]; ok {
			return i
		}
		idx[k] = len(rows)
		rows = append(rows, kindRow{Kind: k, Counts: make([]int64, len(converge.RunStatuses))})
		return idx[k]
	}
	for _, k := range kinds {
		add(k)
	}
	for _, c := range counts {
		i := add(c.Kind)
		for j, s := range converge.RunStatuses {
			if s == c.Status {
				rows[i].Counts[j] += c.Count
			}
		}
		rows[i].Total += c.Count
	}
	return rows
}

// placeholder matches what the failure-cause normalization put in.
var placeholder = regexp.MustCompile(`<(id|hex|ip|n)>`)

// searchText is the longest literal part of a normalized error message:
// searched for as a substring, it finds every message of the group.
func searchText(pattern string) string {
	best := ""
	for _, part := range placeholder.Split(pattern, -1) {
		part = strings.Trim(part, " :.,;()[]{}'\"/-=")
		if len(part) > len(best) {
			best = part
		}
	}
	if len(best) < 3 {
		return ""
	}
	return best
}

// chart is an SVG bar chart of dead letters per hour.
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int64
	Total         int64
	// Ticks label some hours along the bottom.
	Ticks []tick
}

type bar struct {
	X, Y, W, H int
	Count      int64
	Label      string
}

type tick struct {
	X     int
	Label string
}

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartWidth  = 720
	chartHeight = 160
	chartTop    = 16
	chartBottom = 22
	chartLeft   = 4
)

func hourChart(hours []store.HourCount) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	for _, h := range hours {
		c.Max = max(c.Max, h.Count)
		c.Total += h.Count
	}
	if len(hours) == 0 {
		return c
	}
	plot := chartHeight - chartTop - chartBottom
	step := (chartWidth - 2*chartLeft) / len(hours)
	for i, h := range hours {
		height := 0
		if c.Max > 0 {
			height = int(float64(plot) * float64(h.Count) / float64(c.Max))
		}
		if h.Count > 0 && height < 2 {
			height = 2
		}
		x := chartLeft + i*step
		c.Bars = append(c.Bars, bar{X: x + 2, Y: chartTop + plot - height, W: step - 4, H: height, Count: h.Count,
			Label: h.Hour.Format("15:04") + "–" + h.Hour.Add(time.Hour).Format("15:04") + " UTC"})
		if i%4 == 0 || i == len(hours)-1 {
			c.Ticks = append(c.Ticks, tick{X: x + step/2, Label: h.Hour.Format("15h")})
		}
	}
	return c
}
