-- Named queries of a run's log replaced whole (tether.store.log_rewrite) on SQLite. Each
-- block: "-- name: <name>", then a one-line purpose, then the statement.

-- name: lock_run
-- The run's row (the transaction is BEGIN IMMEDIATE: no other writer until it ends).
SELECT rk FROM runs WHERE id = :id;

-- name: last_seq
-- The seq of the run's last event (0: none): the highest key of its range.
SELECT coalesce((SELECT max(key) FROM events WHERE key > r.base AND key < r.base + 4294967296)
                - r.base, 0)
FROM (SELECT rk << 32 AS base FROM runs WHERE id = :id) AS r;

-- name: delete_events
-- Every event of the run (a range of the events B-tree).
DELETE FROM events
WHERE key > (SELECT rk << 32 FROM runs WHERE id = :id)
  AND key < ((SELECT rk FROM runs WHERE id = :id) + 1) << 32;

-- name: delete_snapshots
-- The run's snapshots (they describe the old log; gc sweeps their pages).
DELETE FROM snapshots WHERE run_id = :id;

-- name: insert_event
-- One event of the new log.
INSERT INTO events (key, type, data, at, actor)
SELECT (rk << 32) | :seq, :type, :data, :at, :actor FROM runs WHERE id = :id;

-- name: touch_run
-- The run was written to.
UPDATE runs SET updated_at = :now WHERE id = :id;
