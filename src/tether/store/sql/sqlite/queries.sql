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
       available_at = :available_at, waiting_for = :waiting_for,
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

-- name: get_effect
-- One effect by idempotency key.
SELECT key, run_id, position, tool, status, result, created_at, updated_at
FROM effects WHERE key = ?;

-- name: put_effect
-- Record an effect's intent or outcome (the latest write wins; created_at is kept).
INSERT INTO effects (key, run_id, position, tool, status, result, created_at, updated_at)
VALUES (:key, :run_id, :position, :tool, :status, :result, :now, :now)
ON CONFLICT (key) DO UPDATE SET status = excluded.status, result = excluded.result,
                                updated_at = excluded.updated_at;

-- name: insert_signal
-- Keep a signal until a wait takes it.
INSERT INTO signals (run_id, name, payload, sent_at, sender) VALUES (?, ?, ?, ?, ?);

-- name: wake_for
-- Make a run that waits for exactly this thing resumable (status queued).
UPDATE runs SET status = 'queued', waiting_for = NULL, available_at = :now, updated_at = :now
WHERE id = :id AND status = 'waiting' AND waiting_for = :waiting_for;

-- name: pending_signal
-- The oldest signal of this name not taken yet.
SELECT id, run_id, name, payload, sent_at, sender FROM signals
WHERE run_id = ? AND name = ? AND taken_seq IS NULL ORDER BY id LIMIT 1;

-- name: take_signal
-- Mark a signal taken by the event at seq (only if still pending).
UPDATE signals SET taken_seq = ? WHERE id = ? AND taken_seq IS NULL;

-- name: insert_audit
-- Record a refused or notable operation.
INSERT INTO audit (run_id, at, actor, action, detail) VALUES (?, ?, ?, ?, ?);

-- name: read_audit
-- A run's audit records in order.
SELECT id, run_id, at, actor, action, detail FROM audit WHERE run_id = ? ORDER BY id;

-- name: request_cancel
-- Ask the process executing a run to stop at its next step.
UPDATE runs SET cancel_requested = 1, updated_at = ? WHERE id = ?;

-- name: renew_and_cancels
-- Heartbeat: extend this owner's leases; report the runs asked to cancel.
UPDATE runs SET lease_expires = ? WHERE lease_owner = ? RETURNING id, cancel_requested;

-- == retention (tether gc): each takes a JSON array of run ids ==

-- name: delete_runs_events
-- Retention: every event of the runs.
DELETE FROM events WHERE run_id IN (SELECT value FROM json_each(?));

-- name: delete_runs_snapshots
-- Retention: every snapshot of the runs.
DELETE FROM snapshots WHERE run_id IN (SELECT value FROM json_each(?));

-- name: delete_runs_effects
-- Retention: every effects row (idempotency record) of the runs.
DELETE FROM effects WHERE run_id IN (SELECT value FROM json_each(?));

-- name: delete_runs_signals
-- Retention: every signal sent to the runs, taken or not.
DELETE FROM signals WHERE run_id IN (SELECT value FROM json_each(?));

-- name: delete_runs_rows
-- Retention: the run rows themselves (last, in the same transaction).
DELETE FROM runs WHERE id IN (SELECT value FROM json_each(?));

-- name: vacuum
-- Rebuild the file without the free pages (not inside a transaction).
VACUUM;

-- name: wal_truncate
-- After a VACUUM: move the WAL into the file and truncate the WAL to zero bytes.
PRAGMA wal_checkpoint(TRUNCATE);
