package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
)

// pruneCommand is `converge prune [--dry-run] [--json]`: one pruning pass
// now (SPEC §13), with the configuration's retention, against the
// database directly; --dry-run counts what a pass would delete and writes
// nothing.
func (e *env) pruneCommand() *cobra.Command {
	var configPath string
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Run one retention pass now (--dry-run: count what it would delete)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadAdminConfig(configPath)
			if err != nil {
				return err
			}
			pool, err := openPool(cmd.Context(), cfg, appMode{})
			if err != nil {
				return err
			}
			defer pool.Close()
			// A pass enqueues nothing: an insert-only service, never started.
			svc, err := jobs.NewService(pool, jobs.Config{StoreOptions: storeOptions(cfg)})
			if err != nil {
				return err
			}
			start := time.Now()
			res, err := svc.Store().Prune(cmd.Context(), store.PruneParams{Retention: cfg.Retention.Policy(), DryRun: dryRun, Trigger: "cli"})
			if err != nil {
				if res != nil && res.Total > 0 {
					if asJSON { // the problem body alone, saying what the pass deleted
						return fmt.Errorf("%w (the pass had deleted %d rows before it stopped)", err, res.Total)
					}
					_ = e.printPrune(res, asJSON, time.Since(start))
				}
				return err
			}
			return e.printPrune(res, asJSON, time.Since(start))
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what a pass would delete, by table; write nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}

// printPrune writes a pass's counts: a table of rows by table, or JSON.
func (e *env) printPrune(res *converge.PruneResult, asJSON bool, took time.Duration) error {
	if asJSON {
		b, err := json.Marshal(struct {
			*converge.PruneResult
			DurationMS int64 `json:"duration_ms"`
		}{res, took.Milliseconds()})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(e.stdout, string(b))
		return err
	}
	verb := "deleted"
	if res.DryRun {
		verb = "would delete"
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TABLE\tROWS (%s)\n", verb)
	for _, t := range converge.PruneTables {
		fmt.Fprintf(tw, "%s\t%d\n", t, res.Deleted[t])
	}
	fmt.Fprintf(tw, "total\t%d\n", res.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if !res.DryRun {
		fmt.Fprintf(e.stdout, "%d batches in %s\n", res.Batches, took.Round(time.Millisecond))
	}
	return nil
}
