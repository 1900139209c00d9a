package ui

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// riverPrefix is where River UI is mounted.
const riverPrefix = "/ui/river"

// riverUI serves River UI (its assets are embedded in the module) behind
// the dashboard's session, to operators, read-only (GET and HEAD only:
// ui.routes).
type riverUI struct {
	h *riverui.Handler
}

func newRiverUI(client *river.Client[pgx.Tx], logger *slog.Logger) (*riverUI, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger.With("component", "riverui"),
		Prefix:    riverPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("ui: river ui: %w", err)
	}
	return &riverUI{h: h}, nil
}

func (x *riverUI) start(ctx context.Context) error {
	if err := x.h.Start(ctx); err != nil {
		return fmt.Errorf("ui: start river ui: %w", err)
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (x *riverUI) ServeHTTP(w http.ResponseWriter, r *http.Request) { x.h.ServeHTTP(w, r) }
