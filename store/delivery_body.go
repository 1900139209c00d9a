package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// What a delivery's rules were evaluated on, kept with the delivery
// (migration 000012) so that its dashboard page shows what each rule
// would start for it.

// deliveryContent is the body (JSON text, or nil) and headers (JSON, or
// nil) of a delivery as stored.
func deliveryContent(p DeliveryRecordParams) (*string, []byte) {
	var body *string
	if len(p.Body) > 0 {
		b := string(p.Body)
		body = &b
	}
	var headers []byte
	if p.Headers != nil {
		headers, _ = json.Marshal(p.Headers) // a map of strings always encodes
	}
	return body, headers
}

// deliveryContentUpdate replaces the stored body and headers of delivery
// id, when a rejected delivery is sent again.
func deliveryContentUpdate(ctx context.Context, tx pgx.Tx, id uuid.UUID, body *string, headers []byte) error {
	if _, err := tx.Exec(ctx, `UPDATE converge_deliveries SET body = $2, headers = $3 WHERE id = $1`, id, body, headers); err != nil {
		return fmt.Errorf("write delivery body: %w", err)
	}
	return nil
}

// DeliveryContent is what a delivery's rules were evaluated on.
type DeliveryContent struct {
	// Body is the parsed body as JSON; nil when the delivery was recorded
	// before bodies were kept.
	Body json.RawMessage
	// Headers are the request's headers (lower-case names), without
	// credentials and signatures.
	Headers map[string]string
}

// DeliveryContentGet returns what delivery id's rules were evaluated on.
func (s *Store) DeliveryContentGet(ctx context.Context, id uuid.UUID) (*DeliveryContent, error) {
	var body *string
	var headers []byte
	err := s.db.QueryRow(ctx, `SELECT body, headers FROM converge_deliveries WHERE id = $1`, id).Scan(&body, &headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.Errorf(converge.ENOTFOUND, "delivery %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get delivery body: %w", err)
	}
	c := &DeliveryContent{}
	if body != nil {
		c.Body = json.RawMessage(*body)
	}
	if headers != nil {
		if err := json.Unmarshal(headers, &c.Headers); err != nil {
			return nil, fmt.Errorf("decode delivery headers: %w", err)
		}
	}
	return c, nil
}
