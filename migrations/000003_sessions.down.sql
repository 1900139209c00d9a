DROP INDEX IF EXISTS converge_runs_superseded_finished;
DROP TABLE IF EXISTS converge_sessions;
