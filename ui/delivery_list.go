package ui

import (
	"net/http"
	"net/url"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// deliveryStatuses are the statuses the deliveries filter offers.
var deliveryStatuses = []converge.DeliveryStatus{converge.DeliveryAccepted, converge.DeliveryIgnored, converge.DeliveryRejected}

// deliveryFilter is the deliveries filter as typed in the form: the query
// of GET /v1/deliveries.
type deliveryFilter struct {
	Source string
	Status string
}

// Values is the filter as query parameters, without empty fields.
func (f deliveryFilter) Values() url.Values {
	v := url.Values{}
	if f.Source != "" {
		v.Set("source", f.Source)
	}
	if f.Status != "" {
		v.Set("status", f.Status)
	}
	return v
}

// Active reports whether anything filters.
func (f deliveryFilter) Active() bool { return f.Source != "" || f.Status != "" }

type deliveryListData struct {
	Filter   deliveryFilter
	Problems map[string]string
	Items    []*converge.Delivery
	Limit    int
	// NextURL is the next (older) page; FirstURL the first page, set when
	// this is not the first.
	NextURL  string
	FirstURL string
	Sources  []string
	Statuses []converge.DeliveryStatus
	Sizes    []int
}

func (u *UI) handleDeliveryList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deliveryListData{
		Filter:  deliveryFilter{Source: q.Get("source"), Status: q.Get("status")},
		Sources: u.cfg.Sources, Statuses: deliveryStatuses, Sizes: pageSizes, Limit: 50,
	}
	v := &view{Title: "Deliveries", Nav: "deliveries", Flash: u.takeFlash(r), Data: &d}
	// The API's own parser, so the dashboard refuses what GET
	// /v1/deliveries refuses, with its message.
	p, err := api.ParseDeliveryListParams(r)
	if err != nil {
		u.renderRefusedQuery(w, r, err, "deliveries", v, &d.Problems)
		return
	}
	d.Limit = p.Limit
	items, next, err := u.store.DeliveryList(r.Context(), p)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Items = items
	d.NextURL, d.FirstURL = pageLinks("/ui/deliveries", d.Filter.Values(), d.Limit, next, p.Cursor)
	u.render(w, r, http.StatusOK, "deliveries", v)
}
