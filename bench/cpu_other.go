//go:build !linux

package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// processCPU is unknown here.
func processCPU() time.Duration { return 0 }

// backendCPU is unknown here: it reads /proc.
func backendCPU(context.Context, *pgxpool.Pool) map[int32]time.Duration { return nil }
