-- Named queries of the SQLite backend. Each block: "-- name: <name>", then a
-- one-line purpose, then the statement.

-- name: schema_tables
-- The tables of the database file (none: a new file).
SELECT name FROM sqlite_master WHERE type = 'table';

-- name: schema_version
-- The schema version recorded by the migrations (no row: 0).
SELECT value FROM tether_meta WHERE key = 'schema_version';

-- name: set_schema_version
-- Record the schema version after a migration, in the migration's transaction.
INSERT INTO tether_meta (key, value) VALUES ('schema_version', ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: insert_run
-- Create a run row (the caller appends its first events in the same transaction), as it is
-- after the transition of its first append when it has one (waiting_for, a lease given back).
INSERT INTO runs (id, agent, version, status, code, created_at, updated_at, epoch,
                  lease_owner, lease_expires, parent_id, fork_seq, session_id, owner,
                  queue, priority, available_at, dedup_key, concurrency_key, claimed_at,
                  waiting_for)
VALUES (:id, :agent, :version, :status, :code, :now, :now, :epoch,
        :lease_owner, :lease_expires, :parent_id, :fork_seq, :session_id, :owner,
        :queue, :priority, :available_at, :dedup_key, :concurrency_key,
        CASE WHEN :epoch = 0 THEN NULL ELSE :now END, :waiting_for);

-- name: get_run
-- One run row by id.
SELECT * FROM runs WHERE id = ?;

-- name: append_event
-- Append one event only while the writer's fencing token is current (0 rows: lease lost).
-- The log has no gaps: seq must follow an existing event (one rowid probe).
INSERT INTO events (key, type, data, at, actor)
SELECT (rk << 32) | :seq, :type, :data, :at, :actor FROM runs
WHERE id = :id AND epoch = :epoch
  AND (:seq = 1 OR EXISTS (SELECT 1 FROM events WHERE key = (runs.rk << 32) | (:seq - 1)));

-- name: insert_run_event
-- The first events of a run just inserted, its key known (the run's rk, shifted, with seq).
INSERT INTO events (key, type, data, at, actor) VALUES (?, ?, ?, ?, ?);

-- name: read_events
-- A run's events with after < seq <= upto, in order (a range of the events B-tree).
SELECT :id, e.key - r.base, e.type, e.data, e.at, e.actor
FROM (SELECT rk << 32 AS base FROM runs WHERE id = :id) AS r
JOIN events AS e ON e.key > r.base + :after AND e.key <= r.base + :upto
ORDER BY e.key;

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

-- name: put_blob
-- Store a snapshot page under its SHA-256 once; an existing page is touched (see sweep_blobs).
INSERT INTO blobs (sha256, size, data, created_at, kind) VALUES (?, ?, ?, ?, 'page')
ON CONFLICT (sha256) DO UPDATE SET created_at = excluded.created_at WHERE blobs.kind = 'page';

-- name: count_blobs
-- How many of these digests are stored (a snapshot checks the pages it reuses are there).
SELECT COUNT(*) FROM blobs WHERE sha256 IN (SELECT value FROM json_each(:digests));

-- name: touch_blob
-- A snapshot about to reference a stored page: gc's sweep leaves it for its grace period.
UPDATE blobs SET created_at = ? WHERE sha256 = ? AND kind = 'page' AND created_at < ?;

-- name: _referenced_pages
-- Fragment: the digests of the pages that the snapshots reference.
SELECT j.value FROM snapshots, json_each(snapshots.data, '$.pages') AS j
WHERE json_valid(snapshots.data) AND json_type(snapshots.data, '$.pages') = 'array'

-- name: any_old_page
-- gc: whether any snapshot page is old enough to sweep (else the snapshots need no reading).
SELECT EXISTS (SELECT 1 FROM blobs WHERE kind = 'page' AND created_at < :before);

-- name: sweep_blobs
-- gc: delete the snapshot pages that no snapshot references, no tenant claims (a race of a
-- tenant's delete and another's put may leave a claimed page) and nothing touched since :before.
DELETE FROM blobs
WHERE kind = 'page' AND created_at < :before
  AND sha256 NOT IN ({{_referenced_pages}})
  AND sha256 NOT IN (SELECT sha256 FROM artifact_claims)
RETURNING size;

-- name: count_sweepable_blobs
-- gc --dry-run: the pages sweep_blobs would delete, and their bytes.
SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs
WHERE kind = 'page' AND created_at < :before
  AND sha256 NOT IN ({{_referenced_pages}})
  AND sha256 NOT IN (SELECT sha256 FROM artifact_claims);

-- name: get_blob
-- The stored bytes of a digest.
SELECT data FROM blobs WHERE sha256 = ?;

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

-- name: send_signal
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
-- Ask the process executing a run to stop at its next step (2: and compensate).
UPDATE runs SET cancel_requested = ?, updated_at = ? WHERE id = ?;

-- == retention (tether gc): each takes a JSON array of run ids ==

-- name: delete_run_events
-- Retention: every event of one run (a range of the events B-tree).
DELETE FROM events
WHERE key > (SELECT rk << 32 FROM runs WHERE id = :id)
  AND key < ((SELECT rk FROM runs WHERE id = :id) + 1) << 32;

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

-- name: find_dedup
-- The active run holding a dedup key in a queue.
SELECT id FROM runs WHERE queue = ? AND dedup_key = ?
  AND status IN ('queued', 'running', 'waiting', 'blocked');

-- name: queue_depth
-- How many runs wait in a queue to be claimed.
SELECT COUNT(*) FROM runs WHERE queue = ? AND status = 'queued';

-- name: _serves
-- Fragment of claim_candidates: the run is of a version this worker serves. :pinned and
-- :served are NULL for a worker that serves every run; else :pinned is the JSON array of
-- the agents it registers at given versions, :served the JSON array of its [agent,
-- version] pairs (version null: the agent's code registered without one).
(:pinned IS NULL OR agent NOT IN (SELECT value FROM json_each(:pinned))
 OR EXISTS (SELECT 1 FROM json_each(:served) AS s
            WHERE json_extract(s.value, '$[0]') = runs.agent
              AND json_extract(s.value, '$[1]') IS runs.version))

-- name: claim_candidates
-- Claimable runs of one queue, best first: queued and due, waiting and due, or running
-- under an expired lease (its worker died). Queued runs are read in the claim's order from
-- runs_queued_order (schema 6); due waiting runs and expired leases are ranges of
-- runs_claimable and runs_lease_due (schema 8), sorted once found. So a claim reads a few
-- rows whatever the queue's depth, and never the runs that wait for later or execute
-- elsewhere. Runs of versions the worker does not serve are passed over (see _serves).
SELECT id, concurrency_key FROM (
    SELECT * FROM (
        SELECT id, concurrency_key, priority, COALESCE(available_at, created_at) AS due, created_at FROM runs
        WHERE queue = :queue AND status = 'queued'
          AND (available_at IS NULL OR available_at <= :now) AND {{_serves}}
        ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id LIMIT :scan)
    UNION ALL
    SELECT * FROM (
        SELECT id, concurrency_key, priority, COALESCE(available_at, created_at) AS due, created_at FROM runs
        WHERE queue = :queue AND status = 'waiting' AND available_at <= :now AND {{_serves}}
        ORDER BY priority DESC, available_at, created_at, id LIMIT :scan)
    UNION ALL
    SELECT * FROM (
        SELECT id, concurrency_key, priority, COALESCE(available_at, created_at) AS due, created_at FROM runs
        WHERE queue = :queue AND status = 'running'
          AND (CASE WHEN lease_owner IS NULL THEN 0 ELSE lease_expires END) < :now
          AND {{_serves}}
        ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id LIMIT :scan)
)
ORDER BY priority DESC, due, created_at, id
LIMIT :scan;

-- name: running_in_queue
-- Runs of a queue executing under a live lease, by concurrency key.
SELECT concurrency_key, COUNT(*) FROM runs
WHERE queue = :queue AND status = 'running' AND lease_owner IS NOT NULL
  AND lease_expires >= :now
GROUP BY concurrency_key;

-- name: claims_since
-- How many claims a queue made since a time (rate limits), by claim time (runs_claimed).
SELECT COUNT(*) FROM runs WHERE queue = ? AND claimed_at > ?;

-- name: claim_picked
-- Take a claimable run for a worker: a new lease and fencing token.
UPDATE runs SET status = 'running', epoch = epoch + 1, lease_owner = :owner,
       lease_expires = :expires, claimed_at = :now, updated_at = :now, waiting_for = NULL
WHERE id = :id
RETURNING *;

-- name: upsert_worker
-- Register (or re-register) a worker.
INSERT INTO workers (id, host, pid, queues, concurrency, started_at, heartbeat_at, serves)
VALUES (:id, :host, :pid, :queues, :concurrency, :now, :now, :serves)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopping = 0,
                               serves = excluded.serves;

-- name: worker_heartbeat
-- A worker is alive (and whether it was asked to stop).
UPDATE workers SET heartbeat_at = ? WHERE id = ? RETURNING stopping;

-- name: cancel_requests
-- This owner's runs that were asked to cancel.
SELECT id, cancel_requested FROM runs WHERE lease_owner = ? AND cancel_requested > 0;

-- name: list_workers
-- Every registered worker, newest heartbeat first.
SELECT id, host, pid, queues, concurrency, started_at, heartbeat_at, stopping, serves
FROM workers ORDER BY heartbeat_at DESC;

-- name: delete_worker
-- Forget a worker (after it stopped, or when it is known dead).
DELETE FROM workers WHERE id = ?;

-- name: expire_leases
-- Make a dead owner's leases claimable at once.
UPDATE runs SET lease_expires = 0 WHERE lease_owner = ?;

-- == API tokens (tether.services.identity; schema 10) ==

-- name: insert_token
-- Create a token row (its name is unique: a second one with the name is refused).
INSERT INTO tokens (id, name, role, tenant, hash, created_at)
VALUES (:id, :name, :role, :tenant, :hash, :now);

-- name: get_token
-- One token row by its public id (verify compares its hash).
SELECT id, name, role, tenant, hash, created_at, revoked_at, last_used_at
FROM tokens WHERE id = :id;

-- name: list_tokens
-- Every token row, oldest first.
SELECT id, name, role, tenant, hash, created_at, revoked_at, last_used_at
FROM tokens ORDER BY created_at, id;

-- name: revoke_token
-- Revoke a token by name once (a revoked one keeps its first revocation time).
UPDATE tokens SET revoked_at = :now WHERE name = :name AND revoked_at IS NULL;

-- name: token_named
-- Whether a token has this name (revoked or not).
SELECT id FROM tokens WHERE name = :name;

-- name: touch_token
-- Note a token's use (the caller does it at most once a minute per token).
UPDATE tokens SET last_used_at = :now WHERE id = :id;

-- == the run list and the inbox (schema 11: their indexes) ==
-- page_runs and inbox_runs hold a /*filters*/ mark where the store puts the conditions of
-- the filters given (the page_runs_* and inbox_runs_* blocks, each "AND …"), so that every
-- statement the database plans has only the conditions it uses, and an index fits it.

-- name: page_runs
-- A page of runs, newest first (the caller asks one row more: is there a next page).
SELECT * FROM runs WHERE 1 = 1 /*filters*/ ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: page_runs_status
-- Filter of page_runs: one status.
AND status = :status

-- name: page_runs_agent
-- Filter of page_runs: one agent.
AND agent = :agent

-- name: page_runs_version
-- Filter of page_runs: one version of the agents' (runs without one never match).
AND version = :version

-- name: run_counts
-- How many runs the page_runs_* filters (the /*filters*/ mark) select, by agent, version
-- and status: what `tether runs --count` prints (one read of the runs they select).
SELECT agent, version, status, COUNT(*) FROM runs WHERE 1 = 1 /*filters*/
GROUP BY agent, version, status ORDER BY agent, version, status;

-- name: page_runs_queue
-- Filter of page_runs: one queue.
AND queue = :queue

-- name: page_runs_session
-- Filter of page_runs: the runs of one session.
AND session_id = :session

-- name: page_runs_tenant
-- Filter of page_runs and inbox_runs: one tenant's runs (runs.owner).
AND owner = :tenant

-- name: page_runs_text
-- Filter of page_runs: the run id or the agent starts with the text (two index ranges).
AND ((id >= :lo AND id < :hi) OR (agent >= :lo AND agent < :hi))

-- name: page_runs_after
-- Filter of page_runs: created at or after a time.
AND created_at >= :created_after

-- name: page_runs_before
-- Filter of page_runs: created before a time.
AND created_at < :created_before

-- name: page_runs_cursor
-- Keyset: the runs after the last one of the previous page (newest first).
AND (created_at, id) < (:cursor_at, :cursor_id)

-- name: inbox_runs
-- A page of runs waiting for a person (an approval, a tool call in doubt, a budget to
-- raise), oldest first: schema 14's partial index, named (SQLite, without statistics,
-- prefers runs_status's equality and sorts every waiting run, timers included).
SELECT * FROM runs INDEXED BY runs_inbox
WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%'
                              OR waiting_for LIKE 'budget:%')
  /*filters*/
ORDER BY updated_at, id LIMIT :limit;

-- name: inbox_runs_owner
-- inbox_runs for one tenant (its filters hold page_runs_tenant): runs_owner_inbox.
SELECT * FROM runs INDEXED BY runs_owner_inbox
WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%'
                              OR waiting_for LIKE 'budget:%')
  /*filters*/
ORDER BY updated_at, id LIMIT :limit;

-- name: inbox_runs_cursor
-- Keyset: the inbox's runs after the last one of the previous page (oldest first).
AND (updated_at, id) > (:cursor_at, :cursor_id)

-- name: usage_totals
-- Model usage per agent or per session (:by) of the runs the page_runs_* filters (the
-- /*filters*/ mark) select: each run's model calls' step.completed events, read as the
-- run's range of the events B-tree; the usage recorded with a call (priced by tether) or its
-- result's.
SELECT CASE WHEN :by = 'session' THEN r.session_id ELSE r.agent END AS key,
       COUNT(DISTINCT r.id), COUNT(*),
       SUM(COALESCE(json_extract(e.data, '$.usage.cost'),
                    json_extract(e.data, '$.output.usage.cost'),
                    json_extract(e.data, '$.output.usage.cost_usd'), 0)),
       SUM(COALESCE(json_extract(e.data, '$.usage.input_tokens'),
                    json_extract(e.data, '$.output.usage.input_tokens'),
                    json_extract(e.data, '$.output.usage.prompt_tokens'), 0)),
       SUM(COALESCE(json_extract(e.data, '$.usage.output_tokens'),
                    json_extract(e.data, '$.output.usage.output_tokens'),
                    json_extract(e.data, '$.output.usage.completion_tokens'), 0))
FROM runs AS r JOIN events AS e ON e.key > r.rk << 32 AND e.key < (r.rk + 1) << 32
WHERE e.type = 'step.completed' AND json_extract(e.data, '$.kind') = 'llm' /*filters*/
GROUP BY 1 ORDER BY 4 DESC, 1;

-- == metrics (a scrape of /metrics): each a range of an index, never the finished runs ==

-- name: gauge_active_runs
-- The unfinished runs by status and agent (the runs_status index, one range per status).
SELECT status, agent, COUNT(*) FROM runs
WHERE status IN ('queued', 'running', 'waiting', 'blocked')
GROUP BY status, agent;

-- name: gauge_queues
-- Queued runs per queue, and the oldest time one of them became claimable (by :now).
SELECT queue, COUNT(*),
       MIN(CASE WHEN COALESCE(available_at, created_at) <= :now
                THEN COALESCE(available_at, created_at) END)
FROM runs WHERE status = 'queued'
GROUP BY queue;

-- name: gauge_in_doubt
-- Runs waiting for a person to resolve a tool call in doubt (the runs_inbox partial index).
SELECT COUNT(*) FROM runs INDEXED BY runs_inbox
WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%'
                              OR waiting_for LIKE 'budget:%')
  AND waiting_for LIKE 'doubt:%';
