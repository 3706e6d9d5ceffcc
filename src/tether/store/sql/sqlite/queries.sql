-- Named queries of the SQLite backend. Each block: "-- name: <name>", then a
-- one-line purpose, then the statement.

-- name: insert_run
-- Create a run row (the caller appends its first events in the same transaction).
INSERT INTO runs (id, agent, version, status, code, created_at, updated_at, epoch,
                  lease_owner, lease_expires, parent_id, fork_seq, session_id, owner,
                  queue, priority, available_at)
VALUES (:id, :agent, :version, :status, :code, :now, :now, :epoch,
        :lease_owner, :lease_expires, :parent_id, :fork_seq, :session_id, :owner,
        :queue, :priority, :available_at);

-- name: get_run
-- One run row by id.
SELECT * FROM runs WHERE id = ?;

-- name: append_event
-- Append one event only while the writer's fencing token is current (0 rows: lease lost).
INSERT INTO events (run_id, seq, type, data, at, actor)
SELECT ?, ?, ?, ?, ?, ? FROM runs WHERE id = ? AND epoch = ?;

-- name: insert_event
-- Append one event without a fencing check (run creation, holder-free writes).
INSERT INTO events (run_id, seq, type, data, at, actor) VALUES (?, ?, ?, ?, ?, ?);

-- name: last_seq
-- The highest seq of a run's log (0 when empty).
SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?;

-- name: read_events
-- A run's events with after < seq <= upto, in order.
SELECT run_id, seq, type, data, at, actor FROM events
WHERE run_id = ? AND seq > ? AND seq <= ? ORDER BY seq;

-- name: update_status
-- A status transition, in the same transaction as its event.
UPDATE runs SET status = :status, updated_at = :now,
       available_at = :available_at,
       lease_owner = CASE WHEN :release THEN NULL ELSE lease_owner END,
       lease_expires = CASE WHEN :release THEN NULL ELSE lease_expires END
WHERE id = :id;

-- name: claim
-- Take the run's lease when it is free, expired, or held by :takeover; bump the fencing token.
UPDATE runs SET epoch = epoch + 1, lease_owner = :owner, lease_expires = :expires,
       updated_at = :now
WHERE id = :id
  AND (lease_owner IS NULL OR lease_expires < :now OR lease_owner = :takeover
       OR lease_owner = :owner)
RETURNING epoch;

-- name: release
-- Give the lease back (only the current holder can).
UPDATE runs SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND epoch = ?;

-- name: renew
-- Heartbeat: extend every lease this owner holds.
UPDATE runs SET lease_expires = ? WHERE lease_owner = ?;

-- name: latest_snapshot
-- The newest snapshot at or before a seq.
SELECT run_id, seq, data, at FROM snapshots
WHERE run_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1;

-- name: insert_snapshot
-- Cache a folded state (idempotent: a snapshot at a seq is always the same state).
INSERT OR IGNORE INTO snapshots (run_id, seq, data, at) VALUES (?, ?, ?, ?);

-- name: list_runs
-- Runs, newest first, optionally filtered by status and agent.
SELECT * FROM runs
WHERE (:status IS NULL OR status = :status) AND (:agent IS NULL OR agent = :agent)
ORDER BY created_at DESC, id DESC LIMIT :limit;
