-- When the stream's latest version was accepted: a version arriving soon
-- after it is part of a burst and is debounced (the kind's debounce).
ALTER TABLE converge_streams ADD COLUMN latest_at timestamptz;
