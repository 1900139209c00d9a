package jobs

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// PruneQueue is the River queue of the pruning job (one worker: passes
// never overlap anyway, the prune lease sees to it).
const PruneQueue = "converge_retention"

// PruneArgs is the periodic River job that runs one pruning pass.
type PruneArgs struct{}

// Kind implements River's JobArgs.
func (PruneArgs) Kind() string { return "converge_prune" }

// InsertOpts puts the job in PruneQueue and never retries it (the next
// interval runs the next pass). Its uniqueness is per interval
// (prunePeriodicJob).
func (PruneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: PruneQueue, MaxAttempts: 1}
}

// PruneWorker runs a pruning pass (store.Prune) with the configured
// retention and counts what it deleted in converge_pruned_rows_total.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	store     *store.Store
	retention converge.Retention
	logger    *slog.Logger
	metrics   *telemetry.Metrics
}

// Work runs one pass. Another pass holding the lease (converge prune, or a
// worker of another process) is not an error: this one is skipped.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	start := time.Now()
	res, err := w.store.Prune(ctx, store.PruneParams{Retention: w.retention, Trigger: "job", Deleted: w.countPruned})
	if errors.Is(err, store.ErrPruneBusy) {
		w.logger.Info("retention: another pruning pass is running; this one is skipped")
		return nil
	}
	if err != nil {
		w.logger.Error("retention: pruning pass failed", "error", err)
		return err
	}
	if res.Total > 0 {
		w.logger.Info("retention: pruned", "deleted", res.Deleted, "batches", res.Batches, "duration", time.Since(start))
	}
	return nil
}

// countPruned counts rows of a table of converge_pruned_rows_total's
// table label (workflow steps go with their workflow runs, uncounted).
func (w *PruneWorker) countPruned(table string, n int64) {
	if slices.Contains(telemetry.PrunedTables, table) {
		w.metrics.RowsPruned(table, n)
	}
}

// prunePeriodicJob is the periodic job of retention r: one PruneArgs job
// every r.Interval, inserted by River's leader only, and unique per
// interval (River's ByPeriod, with its default states: waiting, running or
// completed), so that passes never pile up. A job left running by a
// worker that was killed blocks only its own interval, not the next ones,
// as a uniqueness by state alone would until River's rescuer ran; the
// pass it was running holds the prune lease until it expires.
//
// River refuses a ByPeriod under a second, so an interval shorter than
// that (tests: config.MinPruneInterval allows 100ms) is unique per second:
// it prunes at most once a second.
func prunePeriodicJob(r converge.Retention) *river.PeriodicJob {
	period := max(r.Interval, time.Second)
	return river.NewPeriodicJob(river.PeriodicInterval(r.Interval),
		func() (river.JobArgs, *river.InsertOpts) {
			return PruneArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: period}}
		},
		&river.PeriodicJobOpts{ID: "converge_prune"})
}

// riverJobRetention returns how long River keeps its completed, cancelled
// and discarded job rows: River's usual periods (an hour, an hour, a
// week), never longer than converge keeps the runs they drove
// (retention.runs), so that no job row outlives its run.
func riverJobRetention(r converge.Retention) (completed, cancelled, discarded time.Duration) {
	completed, cancelled, discarded = time.Hour, time.Hour, 7*24*time.Hour
	if r.Runs > 0 {
		completed, cancelled, discarded = min(completed, r.Runs), min(cancelled, r.Runs), min(discarded, r.Runs)
	}
	return completed, cancelled, discarded
}
