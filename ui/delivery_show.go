package ui

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

type deliveryShowData struct {
	Delivery *converge.Delivery
	// Problem is the mapping-failed detail of a rejected delivery.
	Problem string
	// Body and Headers are what its rules were evaluated on; Body is nil
	// for a delivery recorded before bodies were kept.
	Body    json.RawMessage
	Headers []header
	// Test is what each rule makes of the stored body now (nil without a
	// body, or when the source is no longer configured: TestError says so).
	Test      *converge.SourceTest
	TestError string
}

// header is one stored request header.
type header struct{ Name, Value string }

// Matched reports whether rule i matched when the delivery was received.
func (d *deliveryShowData) Matched(i int) bool { return slices.Contains(d.Delivery.MatchedRules, i) }

func (u *UI) handleDeliveryShow(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	del, err := u.store.DeliveryGet(r.Context(), id)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	content, err := u.store.DeliveryContentGet(r.Context(), id)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	d := &deliveryShowData{Delivery: del, Body: content.Body}
	if len(del.Error) > 0 {
		var p struct {
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(del.Error, &p)
		d.Problem = p.Detail
	}
	for name, v := range content.Headers {
		d.Headers = append(d.Headers, header{name, v})
	}
	slices.SortFunc(d.Headers, func(a, b header) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	switch {
	case content.Body == nil:
	case u.cfg.Explain == nil:
		d.TestError = "the rules are not available to this dashboard"
	default:
		d.Test, err = u.cfg.Explain(del.Source, content.Body, content.Headers)
		if err != nil {
			d.TestError = appMessage(err)
		}
	}
	u.render(w, r, http.StatusOK, "delivery", &view{Title: "Delivery " + del.DeliveryID, Nav: "deliveries", Flash: u.takeFlash(r), Data: d})
}
