-- When the stream's current burst began: the acceptance of the first of
-- its versions that have arrived each less than the kind's debounce after
-- the one before, since the stream's last attempt began. A new run's
-- first attempt is held back the debounce, but never past burst_since
-- plus twenty debounces (SPEC §6; docs/architecture.md, "Debounce"), so that
-- versions arriving without end still reach the target. NULL once an
-- attempt of the stream begins (the lease taken) and on streams written
-- before.
ALTER TABLE converge_streams ADD COLUMN burst_since timestamptz;
