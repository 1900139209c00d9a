package converge

import (
	"time"

	"github.com/google/uuid"
)

// AuditEntry is one operator action, written in the same transaction as its
// effect. The caller fills who acted and why (Actor, Role, Reason,
// RequestID); the store method that acts fills Action and Targets.
type AuditEntry struct {
	ID        uuid.UUID
	At        time.Time
	Actor     string
	Role      string
	Action    string
	Targets   []string
	Reason    string
	RequestID string
	// Detail holds what else the action recorded, such as the runs a
	// redrive started.
	Detail map[string]any
}
