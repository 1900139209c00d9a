DROP TRIGGER IF EXISTS converge_run_counts_truncate ON converge_runs;
DROP TRIGGER IF EXISTS converge_run_counts_delete ON converge_runs;
DROP TRIGGER IF EXISTS converge_run_counts_update ON converge_runs;
DROP TRIGGER IF EXISTS converge_run_counts_insert ON converge_runs;
DROP FUNCTION IF EXISTS converge_run_counts_truncate();
DROP FUNCTION IF EXISTS converge_run_counts_add();
DROP TABLE IF EXISTS converge_run_counts;
