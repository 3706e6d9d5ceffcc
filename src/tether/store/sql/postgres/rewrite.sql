-- Named queries of a run's log replaced whole (tether.store.log_rewrite) on PostgreSQL. Each
-- block: "-- name: <name>", then a one-line purpose, then the statement.

-- name: lock_run
-- Lock the run's row to the end of the transaction (an append locks it too: they queue).
SELECT id FROM runs WHERE id = %(id)s::text FOR UPDATE;

-- name: last_seq
-- The seq of the run's last event (0: none).
SELECT coalesce(max(seq), 0) FROM events WHERE run_id = %(id)s::text;

-- name: delete_events
-- Every event of the run.
DELETE FROM events WHERE run_id = %(id)s::text;

-- name: delete_snapshots
-- The run's snapshots (they describe the old log; gc sweeps their pages).
DELETE FROM snapshots WHERE run_id = %(id)s::text;

-- name: insert_event
-- One event of the new log.
INSERT INTO events (run_id, seq, type, data, at, actor)
VALUES (%(id)s::text, %(seq)s::bigint, %(type)s::text, %(data)s::text, %(at)s::float8,
        %(actor)s::text);

-- name: touch_run
-- The run was written to.
UPDATE runs SET updated_at = %(now)s::float8 WHERE id = %(id)s::text;
