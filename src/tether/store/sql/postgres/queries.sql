-- Named queries of the PostgreSQL backend. Each block: "-- name: <name>", then a
-- one-line purpose, then the statement. Parameters are psycopg placeholders
-- (%(name)s, or %s in order); every parameter is cast, so that a None is typed
-- and a statement is prepared once whatever the Python values are. Tables are
-- found through the connection's search_path (the tether schema).

-- name: migration_lock
-- Serialise concurrent openers of one schema while they check and migrate it (held to COMMIT).
SELECT pg_advisory_xact_lock(%s::int, %s::int);

-- name: schema_tables
-- The tables, views and foreign tables of a schema (empty when the schema does not exist).
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.relname;

-- name: schema_version
-- The schema version recorded by the migrations (no row: 0).
SELECT value FROM tether_meta WHERE key = 'schema_version';

-- name: set_schema_version
-- Record the schema version after a migration, in the migration's transaction.
INSERT INTO tether_meta (key, value) VALUES ('schema_version', %s::text)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: create_run
-- Create a run row and its first events (seq 1..n) in one statement; no row inserted: the id
-- exists. (A dedup key held by another active run fails on runs_dedup.) The row is as the
-- transition of the run's first append leaves it, when it rides along (waiting_for, a lease
-- given back: epoch 1 without an owner).
WITH run AS (
    INSERT INTO runs (id, agent, version, status, code, created_at, updated_at, epoch,
                      lease_owner, lease_expires, parent_id, fork_seq, session_id, owner,
                      queue, priority, available_at, dedup_key, concurrency_key, claimed_at,
                      waiting_for)
    VALUES (%(id)s::text, %(agent)s::text, %(version)s::text, %(status)s::text, %(code)s::text,
            %(now)s::float8, %(now)s::float8, %(epoch)s::bigint, %(lease_owner)s::text,
            %(lease_expires)s::float8, %(parent_id)s::text, %(fork_seq)s::bigint,
            %(session_id)s::text, %(owner)s::text, %(queue)s::text, %(priority)s::bigint,
            %(available_at)s::float8, %(dedup_key)s::text, %(concurrency_key)s::text,
            CASE WHEN %(epoch)s::bigint = 0 THEN NULL ELSE %(now)s::float8 END,
            %(waiting_for)s::text)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT run.id, e.n, e.type, e.data, e.at, e.actor
    FROM run, unnest(%(types)s::text[], %(datas)s::text[], %(ats)s::float8[], %(actors)s::text[])
              WITH ORDINALITY AS e (type, data, at, actor, n)
    RETURNING seq
)
SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM logged);

-- name: get_run
-- One run row by id (columns named: a prepared SELECT * breaks when a migration adds one).
SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
       lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
       waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
FROM runs WHERE id = %s::text;

-- name: list_runs
-- Runs, newest first, optionally filtered by status and agent.
SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
       lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
       waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
FROM runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(agent)s::text IS NULL OR agent = %(agent)s::text)
ORDER BY created_at DESC, id DESC LIMIT %(limit)s::bigint;

-- name: _fenced
-- Fragment of the appends: the run's row while the writer's fencing token is current and its
-- log reaches seq `after` (see append_event), locked FOR NO KEY UPDATE; no row: the lease was
-- lost, the log ends before `after`, or no such run.
fenced AS (
    SELECT id FROM runs WHERE id = %(run_id)s::text AND epoch = %(epoch)s::bigint
      AND (%(after)s::bigint = 0 OR EXISTS (
          SELECT 1 FROM events WHERE run_id = %(run_id)s::text AND seq = %(after)s::bigint))
    FOR NO KEY UPDATE
)

-- name: _transition
-- Fragment of the appends: a status transition of the run (release: give the lease back).
UPDATE runs SET status = %(status)s::text, updated_at = %(now)s::float8,
           available_at = %(available_at)s::float8, waiting_for = %(waiting_for)s::text,
           lease_owner = CASE WHEN %(release)s::bool THEN NULL ELSE lease_owner END,
           lease_expires = CASE WHEN %(release)s::bool THEN NULL ELSE lease_expires END

-- name: append_event
-- The hot path: append one event, only while the writer's fencing token is current (0 rows:
-- lease lost, or no such run). The SELECT locks the run row FOR NO KEY UPDATE, which conflicts
-- with a claim's UPDATE of the epoch: a claim that commits first makes this statement re-read
-- the row, see the new epoch and insert nothing; an append that locks first commits before the
-- claim can. A taken seq fails on the primary key; a seq past the log's end inserts nothing
-- (the log has no gaps: seq `after` must exist, one probe of the primary key). One statement:
-- one round trip, one commit.
INSERT INTO events (run_id, seq, type, data, at, actor)
SELECT id, %(seq)s::bigint, %(type)s::text, %(data)s::text, %(at)s::float8, %(actor)s::text
FROM runs WHERE id = %(run_id)s::text AND epoch = %(epoch)s::bigint
  AND (%(after)s::bigint = 0 OR EXISTS (
      SELECT 1 FROM events WHERE run_id = %(run_id)s::text AND seq = %(after)s::bigint))
FOR NO KEY UPDATE;

-- name: append_event_effect
-- One event and one effects-table write (a tool call's intent or outcome), fenced as in
-- append_event, as one statement; returns 1 when the fencing passed. (A statement touches only
-- the tables it names: the general append_events costs about twice as much.)
WITH {{_fenced}}, logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT fenced.id, %(seq)s::bigint, %(type)s::text, %(data)s::text, %(at)s::float8,
           %(actor)s::text
    FROM fenced
    RETURNING seq
), effected AS (
    INSERT INTO effects (key, run_id, position, tool, status, result, created_at, updated_at)
    SELECT %(fx_key)s::text, %(fx_run)s::text, %(fx_position)s::bigint, %(fx_tool)s::text,
           %(fx_status)s::text, %(fx_result)s::text, %(now)s::float8, %(now)s::float8
    FROM fenced
    ON CONFLICT (key) DO UPDATE SET status = excluded.status, result = excluded.result,
                                    updated_at = excluded.updated_at
    RETURNING key
)
SELECT count(*) FROM fenced;

-- name: append_event_transition
-- One event and a status transition (a run starts, waits, stops or ends), fenced as in
-- append_event, as one statement; returns 1 when the fencing passed.
WITH {{_fenced}}, logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT fenced.id, %(seq)s::bigint, %(type)s::text, %(data)s::text, %(at)s::float8,
           %(actor)s::text
    FROM fenced
    RETURNING seq
), moved AS (
    {{_transition}}
    WHERE id = (SELECT id FROM fenced)
    RETURNING id
)
SELECT count(*) FROM fenced;

-- name: _logged_moved
-- Fragment of the appends of several events: insert them as seq expected+1… and make the
-- optional status transition (status NULL: none), both only when `ok` holds the run's id.
logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT ok.id, %(expected)s::bigint + e.n, e.type, e.data, e.at, e.actor
    FROM ok, unnest(%(types)s::text[], %(datas)s::text[], %(ats)s::float8[],
                    %(actors)s::text[]) WITH ORDINALITY AS e (type, data, at, actor, n)
    RETURNING seq
), moved AS (
    {{_transition}}
    WHERE id = (SELECT id FROM ok) AND %(status)s::text IS NOT NULL
    RETURNING id
)

-- name: append_events_transition
-- Several events and an optional status transition (status NULL: none), nothing else (a
-- run's start riding with its first step), fenced as in append_event, as one statement;
-- returns 1 when the fencing passed. The general append_events costs the server and the
-- client about twice as much.
WITH {{_fenced}}, ok AS (
    SELECT id FROM fenced
), {{_logged_moved}}
SELECT count(*) FROM fenced;

-- name: append_events
-- The general append: events as seq expected+1… with the optional status transition, effects
-- writes, signal takes and snapshot, fenced as in append_event, as one statement (one round
-- trip, one commit). Events and writes arrive as parallel arrays. Every write hangs on `ok`: the fencing
-- passed and every signal to take is still pending (locked, so a concurrent taker waits and
-- then finds it taken), so a refusal writes nothing. Returns (fenced, ok) as 0/1.
-- FOR NO KEY UPDATE rather than FOR SHARE: two same-epoch writers that both held a share lock
-- would deadlock when their transitions upgrade it.
WITH {{_fenced}}, takeable AS (
    SELECT s.id, t.seq FROM signals s
    JOIN unnest(%(take_ids)s::bigint[], %(take_seqs)s::bigint[]) AS t (id, seq) ON s.id = t.id
    WHERE s.taken_seq IS NULL
    FOR UPDATE OF s
), ok AS (
    SELECT id FROM fenced
    WHERE (SELECT count(DISTINCT id) FROM takeable) = cardinality(%(take_ids)s::bigint[])
), {{_logged_moved}}, effected AS (
    INSERT INTO effects (key, run_id, position, tool, status, result, created_at, updated_at)
    SELECT w.key, w.run_id, w.position, w.tool, w.status, w.result,
           %(now)s::float8, %(now)s::float8
    FROM ok, unnest(%(fx_keys)s::text[], %(fx_runs)s::text[], %(fx_positions)s::bigint[],
                    %(fx_tools)s::text[], %(fx_statuses)s::text[], %(fx_results)s::text[])
             AS w (key, run_id, position, tool, status, result)
    ON CONFLICT (key) DO UPDATE SET status = excluded.status, result = excluded.result,
                                    updated_at = excluded.updated_at
    RETURNING key
), taken AS (
    UPDATE signals SET taken_seq = takeable.seq
    FROM takeable, ok WHERE signals.id = takeable.id
    RETURNING signals.id
), snapped AS (
    INSERT INTO snapshots (run_id, seq, data, at)
    SELECT %(snap_run)s::text, %(snap_seq)s::bigint, %(snap_data)s::text, %(snap_at)s::float8
    FROM ok WHERE %(snap_data)s::text IS NOT NULL
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING seq
)
SELECT (SELECT count(*) FROM fenced), (SELECT count(*) FROM ok);

-- name: read_events
-- A run's events with after < seq <= upto, in order.
SELECT run_id, seq, type, data, at, actor FROM events
WHERE run_id = %s::text AND seq > %s::bigint AND seq <= %s::bigint ORDER BY seq;

-- name: update_status
-- A status transition without an event (repairs and tests).
UPDATE runs SET status = %(status)s::text, updated_at = %(now)s::float8,
       available_at = %(available_at)s::float8, waiting_for = %(waiting_for)s::text,
       lease_owner = CASE WHEN %(release)s::bool THEN NULL ELSE lease_owner END,
       lease_expires = CASE WHEN %(release)s::bool THEN NULL ELSE lease_expires END
WHERE id = %(id)s::text;

-- name: claim
-- Take the run's lease when it is free, expired, ours, or held by :takeover; bump the fencing
-- token. The UPDATE locks the row like SELECT … FOR UPDATE: a concurrent claimer waits, then
-- re-checks the condition against the committed row, so exactly one of them wins.
UPDATE runs SET epoch = epoch + 1, lease_owner = %(owner)s::text,
       lease_expires = %(expires)s::float8, updated_at = %(now)s::float8
WHERE id = %(id)s::text
  AND (lease_owner IS NULL OR lease_expires < %(now)s::float8
       OR lease_owner = %(takeover)s::text OR lease_owner = %(owner)s::text)
RETURNING epoch;

-- name: release
-- Give the lease back (only the current holder can).
UPDATE runs SET lease_owner = NULL, lease_expires = NULL
WHERE id = %s::text AND epoch = %s::bigint;

-- name: renew
-- Heartbeat: extend every lease this owner holds.
UPDATE runs SET lease_expires = %s::float8 WHERE lease_owner = %s::text;

-- name: create_schema
-- Create tether's schema ({schema} is filled in as a quoted identifier) before the first migration.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: load_run
-- A run's row, its newest snapshot at or before upto, and its events after that snapshot up
-- to upto, as one row of three JSON texts (NULL: no run, no snapshot, no events). One
-- statement reads one snapshot of the database, so the three agree without a transaction.
SELECT
    (SELECT row_to_json(r)::text FROM (
        SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
               lease_expires, parent_id, fork_seq, session_id, owner, queue, priority,
               available_at, waiting_for, cancel_requested, dedup_key, concurrency_key,
               claimed_at
        FROM runs WHERE id = %(id)s::text) AS r),
    (SELECT json_build_array(run_id, seq, data, at)::text FROM snapshots
     WHERE run_id = %(id)s::text AND seq <= %(upto)s::bigint ORDER BY seq DESC LIMIT 1),
    (SELECT json_agg(json_build_array(run_id, seq, type, data, at, actor) ORDER BY seq)::text
     FROM events
     WHERE run_id = %(id)s::text AND seq <= %(upto)s::bigint
       AND seq > COALESCE((SELECT max(seq) FROM snapshots
                           WHERE run_id = %(id)s::text AND seq <= %(upto)s::bigint), 0));

-- name: server_clock
-- The server's clock now, in seconds since the epoch (not the transaction's start: now()).
SELECT extract(epoch FROM clock_timestamp())::float8;

-- name: schema_exists
-- One row when the schema exists (creating it needs a privilege that using it does not).
SELECT 1 FROM pg_namespace WHERE nspname = %s;

-- name: get_effect
-- One effect by idempotency key.
SELECT key, run_id, position, tool, status, result, created_at, updated_at
FROM effects WHERE key = %s::text;

-- name: send_signal
-- Keep a signal for an existing run and wake the run if it waits for it, in one statement.
-- Returns (the run exists, it was woken) as 0/1.
WITH run AS (
    SELECT id FROM runs WHERE id = %(id)s::text
), sent AS (
    INSERT INTO signals (run_id, name, payload, sent_at, sender)
    SELECT run.id, %(name)s::text, %(payload)s::text, %(now)s::float8, %(sender)s::text FROM run
    RETURNING id
), woke AS (
    UPDATE runs SET status = 'queued', waiting_for = NULL, available_at = %(now)s::float8,
           updated_at = %(now)s::float8
    WHERE id = (SELECT id FROM run) AND status = 'waiting'
      AND waiting_for = %(waiting_for)s::text
    RETURNING id
)
SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM woke);

-- name: wake_for
-- Make a run that waits for exactly this thing resumable (status queued).
UPDATE runs SET status = 'queued', waiting_for = NULL, available_at = %(now)s::float8,
       updated_at = %(now)s::float8
WHERE id = %(id)s::text AND status = 'waiting' AND waiting_for = %(waiting_for)s::text;

-- name: pending_signal
-- The oldest signal of this name not taken yet.
SELECT id, run_id, name, payload, sent_at, sender FROM signals
WHERE run_id = %s::text AND name = %s::text AND taken_seq IS NULL ORDER BY id LIMIT 1;

-- name: insert_audit
-- Record a refused or notable operation.
INSERT INTO audit (run_id, at, actor, action, detail)
VALUES (%s::text, %s::float8, %s::text, %s::text, %s::text);

-- name: read_audit
-- A run's audit records in order.
SELECT id, run_id, at, actor, action, detail FROM audit WHERE run_id = %s::text ORDER BY id;

-- name: request_cancel
-- Ask the process executing a run to stop at its next step (2: and compensate).
UPDATE runs SET cancel_requested = %s::int, updated_at = %s::float8 WHERE id = %s::text;

-- name: delete_runs
-- Retention: the runs with their events, snapshots, effects and signals, as one statement;
-- returns how many run rows were deleted. Audit records are kept.
WITH gone_events AS (
    DELETE FROM events WHERE run_id = ANY(%(ids)s::text[])
), gone_snapshots AS (
    DELETE FROM snapshots WHERE run_id = ANY(%(ids)s::text[])
), gone_effects AS (
    DELETE FROM effects WHERE run_id = ANY(%(ids)s::text[])
), gone_signals AS (
    DELETE FROM signals WHERE run_id = ANY(%(ids)s::text[])
), gone_runs AS (
    DELETE FROM runs WHERE id = ANY(%(ids)s::text[]) RETURNING id
)
SELECT count(*) FROM gone_runs;

-- name: vacuum
-- Make deleted rows' space reusable and return trailing empty pages to the file system
-- (not inside a transaction; tether's tables only).
VACUUM runs, events, snapshots, blobs, effects, signals, audit;

-- == the queue and its workers ==

-- name: queue_lock
-- Serialise the claims (or bounded enqueues) of one queue, to the end of the transaction, so
-- that counts read after it (running, recent claims, depth) stay true until the commit.
SELECT pg_advisory_xact_lock(%s::int, %s::int);

-- name: enqueue
-- Create a queued run unless its id, or its (queue, dedup key) among active runs, is taken,
-- or the queue is full (depth >= max_depth); returns (an existing run's id, the depth, created).
-- A concurrent enqueue of the same key makes ON CONFLICT skip the insert: the caller looks the
-- holder up again (find_dedup) with a fresh snapshot.
WITH existing AS (
    SELECT id FROM runs WHERE id = %(id)s::text
    UNION ALL
    (SELECT id FROM runs
     WHERE queue = %(queue)s::text AND dedup_key = %(dedup_key)s::text
       AND status IN ('queued', 'running', 'waiting', 'blocked')
     LIMIT 1)
), depth AS (
    SELECT count(*) AS n FROM runs
    WHERE %(max_depth)s::bigint IS NOT NULL AND queue = %(queue)s::text AND status = 'queued'
), run AS (
    INSERT INTO runs (id, agent, version, status, code, created_at, updated_at, parent_id,
                      fork_seq, session_id, owner, queue, priority, available_at, dedup_key,
                      concurrency_key)
    SELECT %(id)s::text, %(agent)s::text, %(version)s::text, %(status)s::text, %(code)s::text,
           %(now)s::float8, %(now)s::float8, %(parent_id)s::text, %(fork_seq)s::bigint,
           %(session_id)s::text, %(owner)s::text, %(queue)s::text, %(priority)s::bigint,
           %(available_at)s::float8, %(dedup_key)s::text, %(concurrency_key)s::text
    WHERE NOT EXISTS (SELECT 1 FROM existing)
      AND (%(max_depth)s::bigint IS NULL OR (SELECT n FROM depth) < %(max_depth)s::bigint)
    ON CONFLICT DO NOTHING
    RETURNING id
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT run.id, e.n, e.type, e.data, e.at, e.actor
    FROM run, unnest(%(types)s::text[], %(datas)s::text[], %(ats)s::float8[], %(actors)s::text[])
              WITH ORDINALITY AS e (type, data, at, actor, n)
    RETURNING seq
)
SELECT (SELECT id FROM existing LIMIT 1), (SELECT n FROM depth), (SELECT count(*) FROM run),
       -- wake the workers in the same transaction: delivered at commit, only if created
       (SELECT pg_notify(%(channel)s::text, %(queue)s::text) FROM run);

-- name: find_dedup
-- The run holding an id, or the active run holding a dedup key in a queue.
SELECT id FROM runs WHERE id = %(id)s::text
UNION ALL
SELECT id FROM runs WHERE queue = %(queue)s::text AND dedup_key = %(dedup_key)s::text
  AND status IN ('queued', 'running', 'waiting', 'blocked')
LIMIT 1;

-- name: running_in_queue
-- Runs of a queue executing under a live lease, by concurrency key.
SELECT concurrency_key, count(*) FROM runs
WHERE queue = %(queue)s::text AND status = 'running' AND lease_owner IS NOT NULL
  AND lease_expires >= %(now)s::float8
GROUP BY concurrency_key;

-- name: claims_since
-- How many claims a queue made since a time (rate limits), by claim time (runs_claimed).
SELECT count(*) FROM runs WHERE queue = %s::text AND claimed_at > %s::float8;

-- name: _serves
-- Fragment of _claimable: the run is of a version this worker serves. pinned and served
-- are NULL for a worker that serves every run; else pinned is the JSON array of the agents
-- it registers at given versions, served the JSON array of its [agent, version] pairs
-- (version null: the agent's code registered without one).
(%(pinned)s::jsonb IS NULL
 OR NOT agent = ANY(ARRAY(SELECT jsonb_array_elements_text(%(pinned)s::jsonb)))
 OR EXISTS (SELECT 1 FROM jsonb_array_elements(%(served)s::jsonb) AS s(pair)
            WHERE s.pair->>0 = agent AND (s.pair->>1) IS NOT DISTINCT FROM version))

-- name: _claimable
-- Fragment of claim_fast and claim_candidates: the claimable runs of a queue in the claim's
-- order, at most scan of each kind, locked (FOR UPDATE SKIP LOCKED: rows another worker is
-- claiming are passed over, a row changed since the statement began is re-checked). Queued
-- runs are read in that order from runs_queued_order (schema 6); waiting runs whose time is
-- due and running runs whose lease expired are ranges of runs_claimable and runs_lease_due
-- (schema 8), sorted once found: a claim never reads the runs that wait for later or
-- execute elsewhere. Runs of versions the worker does not serve are passed over (_serves).
queued AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = %(queue)s::text AND status = 'queued'
      AND (available_at IS NULL OR available_at <= %(now)s::float8) AND {{_serves}}
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT %(scan)s::bigint
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = %(queue)s::text AND status = 'waiting' AND available_at <= %(now)s::float8
      AND {{_serves}}
    ORDER BY priority DESC, available_at, created_at, id
    LIMIT %(scan)s::bigint
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = %(queue)s::text AND status = 'running'
      AND (CASE WHEN lease_owner IS NULL THEN 0 ELSE lease_expires END) < %(now)s::float8
      AND {{_serves}}
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT %(scan)s::bigint
    FOR UPDATE SKIP LOCKED
)

-- name: claim_candidates
-- Claimable runs of one queue, best first, locked (as in claim_fast: three locked scans,
-- the best of them): queued and due, waiting and due, or running under an expired lease.
-- The rows as they are before the claim.
WITH {{_claimable}}
SELECT * FROM (SELECT * FROM queued UNION ALL SELECT * FROM due
               UNION ALL SELECT * FROM expired) AS claimable
ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
LIMIT %(scan)s::bigint;

-- name: claim_fast
-- One statement (one round trip) for a queue without limits: take the best claimable runs,
-- skipping rows other workers are claiming; returns each row as it was before the claim, as
-- JSON text, with the new fencing token, and the run's log as load_run reads it (its newest
-- snapshot and the events after it: the worker loads the run next, so the claim brings
-- it). (Sent through pgwire, which reads text: JSON is one cheap parse for a whole row.)
-- Claimable: queued and due, waiting and due, or running under an expired lease, each kind
-- read and locked as _claimable says; then the best of the three are taken.
-- The claimed rows are updated by primary key (= ANY of their ids), never joined: a plan
-- made once (the group commit's connections use generic plans) cannot know how many rows
-- LIMIT takes, and joined it scanned the whole table for them; left to plan each claim,
-- PostgreSQL spent more time planning than claiming.
WITH {{_claimable}}, picked AS (
    SELECT * FROM (SELECT * FROM queued UNION ALL SELECT * FROM due
                   UNION ALL SELECT * FROM expired) AS claimable
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT %(scan)s::bigint
), taken AS (
    UPDATE runs AS r SET status = 'running', epoch = r.epoch + 1, lease_owner = %(owner)s::text,
           lease_expires = %(expires)s::float8, claimed_at = %(now)s::float8,
           updated_at = %(now)s::float8, waiting_for = NULL
    WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING r.id, r.epoch AS new_epoch
)
SELECT row_to_json(picked)::text, taken.new_epoch,
       (SELECT json_build_array(s.run_id, s.seq, s.data, s.at)::text FROM snapshots AS s
        WHERE s.run_id = picked.id ORDER BY s.seq DESC LIMIT 1),
       (SELECT json_agg(json_build_array(e.run_id, e.seq, e.type, e.data, e.at, e.actor)
                        ORDER BY e.seq)::text
        FROM events AS e
        WHERE e.run_id = picked.id
          AND e.seq > COALESCE((SELECT max(seq) FROM snapshots WHERE run_id = picked.id), 0))
FROM picked JOIN taken ON taken.id = picked.id
ORDER BY picked.priority DESC, COALESCE(picked.available_at, picked.created_at),
         picked.created_at, picked.id;

-- name: claim_picked
-- Take locked claimable runs for a worker: new leases and fencing tokens.
UPDATE runs SET status = 'running', epoch = epoch + 1, lease_owner = %(owner)s::text,
       lease_expires = %(expires)s::float8, claimed_at = %(now)s::float8,
       updated_at = %(now)s::float8, waiting_for = NULL
WHERE id = ANY(%(ids)s::text[])
RETURNING id, epoch;

-- name: upsert_worker
-- Register (or re-register) a worker.
INSERT INTO workers (id, host, pid, queues, concurrency, started_at, heartbeat_at, serves)
VALUES (%(id)s::text, %(host)s::text, %(pid)s::int, %(queues)s::text, %(concurrency)s::int,
        %(now)s::float8, %(now)s::float8, %(serves)s::text)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopping = 0,
                               serves = excluded.serves;

-- name: worker_heartbeat
-- A worker is alive: extend its leases and its row, in one statement. One row per run of it
-- asked to cancel (run id, 1 or 2), or one row with a NULL id; each row says whether the worker
-- was asked to stop (NULL: no such worker).
WITH renewed AS (
    UPDATE runs SET lease_expires = %(expires)s::float8 WHERE lease_owner = %(id)s::text
    RETURNING id, cancel_requested
), beat AS (
    UPDATE workers SET heartbeat_at = %(now)s::float8 WHERE id = %(id)s::text
    RETURNING stopping
)
SELECT (SELECT stopping FROM beat), renewed.id, renewed.cancel_requested
FROM (SELECT 1) AS one LEFT JOIN renewed ON renewed.cancel_requested > 0;

-- name: cancel_requests
-- This owner's runs that were asked to cancel (read from the partial index of leased runs).
SELECT id, cancel_requested FROM runs WHERE lease_owner = %s::text AND cancel_requested > 0;

-- name: list_workers
-- Every registered worker, newest heartbeat first.
SELECT id, host, pid, queues, concurrency, started_at, heartbeat_at, stopping, serves
FROM workers ORDER BY heartbeat_at DESC;

-- name: remove_worker
-- Forget a worker; optionally make its leases claimable at once.
WITH gone AS (
    DELETE FROM workers WHERE id = %(id)s::text
)
UPDATE runs SET lease_expires = 0 WHERE lease_owner = %(id)s::text AND %(expire)s::bool;

-- name: notify_work
-- Wake the workers that LISTEN on this schema's channel: the payload is the queue's name.
SELECT pg_notify(%s::text, %s::text);

-- name: listen
-- Subscribe this session to the schema's work channel ({channel} is a quoted identifier).
LISTEN {channel};

-- name: insert_snapshot
-- Cache a folded state (idempotent: a snapshot at a seq is always the same state).
INSERT INTO snapshots (run_id, seq, data, at)
VALUES (%s::text, %s::bigint, %s::text, %s::float8)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: put_blob
-- Store a snapshot page under its SHA-256 once; an existing page is touched (see sweep_blobs).
INSERT INTO blobs (sha256, size, data, created_at, kind)
VALUES (%s::text, %s::bigint, %s::bytea, %s::float8, 'page')
ON CONFLICT (sha256) DO UPDATE SET created_at = excluded.created_at WHERE blobs.kind = 'page';

-- name: count_blobs
-- How many of these digests are stored (a snapshot checks the pages it reuses are there).
SELECT COUNT(*) FROM blobs WHERE sha256 = ANY(%(digests)s::text[]);

-- name: touch_blob
-- A snapshot about to reference a stored page: gc's sweep leaves it for its grace period.
UPDATE blobs SET created_at = %s::float8
WHERE sha256 = %s::text AND kind = 'page' AND created_at < %s::float8;

-- name: _referenced_pages
-- Fragment: the digests of the pages that the snapshots reference.
SELECT p.digest FROM snapshots AS s
CROSS JOIN LATERAL jsonb_array_elements_text(
    CASE WHEN jsonb_typeof(s.data::jsonb -> 'pages') = 'array'
         THEN s.data::jsonb -> 'pages' ELSE '[]'::jsonb END) AS p(digest)

-- name: any_old_page
-- gc: whether any snapshot page is old enough to sweep (else the snapshots need no reading).
SELECT EXISTS (SELECT 1 FROM blobs WHERE kind = 'page' AND created_at < %(before)s::float8);

-- name: sweep_blobs
-- gc: delete the snapshot pages that no snapshot references, no tenant claims (a race of a
-- tenant's delete and another's put may leave a claimed page) and nothing touched since before.
DELETE FROM blobs
WHERE kind = 'page' AND created_at < %(before)s::float8
  AND sha256 NOT IN ({{_referenced_pages}})
  AND sha256 NOT IN (SELECT sha256 FROM artifact_claims)
RETURNING size;

-- name: count_sweepable_blobs
-- gc --dry-run: the pages sweep_blobs would delete, and their bytes.
SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs
WHERE kind = 'page' AND created_at < %(before)s::float8
  AND sha256 NOT IN ({{_referenced_pages}})
  AND sha256 NOT IN (SELECT sha256 FROM artifact_claims);

-- name: get_blob
-- The stored bytes of a digest.
SELECT data FROM blobs WHERE sha256 = %s::text;

-- == API tokens (tether.services.identity; schema 10) ==

-- name: insert_token
-- Create a token row (its name is unique: a second one with the name is refused).
INSERT INTO tokens (id, name, role, tenant, hash, created_at)
VALUES (%(id)s::text, %(name)s::text, %(role)s::text, %(tenant)s::text, %(hash)s::text,
        %(now)s::float8);

-- name: get_token
-- One token row by its public id (verify compares its hash).
SELECT id, name, role, tenant, hash, created_at, revoked_at, last_used_at
FROM tokens WHERE id = %(id)s::text;

-- name: list_tokens
-- Every token row, oldest first.
SELECT id, name, role, tenant, hash, created_at, revoked_at, last_used_at
FROM tokens ORDER BY created_at, id;

-- name: revoke_token
-- Revoke a token by name once (a revoked one keeps its first revocation time).
UPDATE tokens SET revoked_at = %(now)s::float8
WHERE name = %(name)s::text AND revoked_at IS NULL;

-- name: token_named
-- Whether a token has this name (revoked or not).
SELECT id FROM tokens WHERE name = %(name)s::text;

-- name: touch_token
-- Note a token's use (the caller does it at most once a minute per token).
UPDATE tokens SET last_used_at = %(now)s::float8 WHERE id = %(id)s::text;

-- == the run list and the inbox (schema 11: their indexes) ==
-- page_runs and inbox_runs hold a /*filters*/ mark where the store puts the conditions of
-- the filters given (the page_runs_* and inbox_runs_* blocks, each "AND …"), so that every
-- statement the database plans has only the conditions it uses, and an index fits it.

-- name: page_runs
-- A page of runs, newest first (the caller asks one row more: is there a next page).
SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
       lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
       waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
FROM runs WHERE TRUE /*filters*/ ORDER BY created_at DESC, id DESC LIMIT %(limit)s::bigint;

-- name: page_runs_status
-- Filter of page_runs: one status.
AND status = %(status)s::text

-- name: page_runs_agent
-- Filter of page_runs: one agent.
AND agent = %(agent)s::text

-- name: page_runs_version
-- Filter of page_runs: one version of the agents' (runs without one never match).
AND version = %(version)s::text

-- name: run_counts
-- How many runs the page_runs_* filters (the /*filters*/ mark) select, by agent, version
-- and status: what `tether runs --count` prints (one read of the runs they select).
SELECT agent, version, status, count(*) FROM runs WHERE true /*filters*/
GROUP BY agent, version, status ORDER BY agent, version NULLS FIRST, status;

-- name: page_runs_queue
-- Filter of page_runs: one queue.
AND queue = %(queue)s::text

-- name: page_runs_session
-- Filter of page_runs: the runs of one session.
AND session_id = %(session)s::text

-- name: page_runs_tenant
-- Filter of page_runs and inbox_runs: one tenant's runs (runs.owner).
AND owner = %(tenant)s::text

-- name: page_runs_text
-- Filter of page_runs: the run id or the agent starts with the text (two index ranges).
AND ((id >= %(lo)s::text AND id < %(hi)s::text) OR (agent >= %(lo)s::text AND agent < %(hi)s::text))

-- name: page_runs_after
-- Filter of page_runs: created at or after a time.
AND created_at >= %(created_after)s::float8

-- name: page_runs_before
-- Filter of page_runs: created before a time.
AND created_at < %(created_before)s::float8

-- name: page_runs_cursor
-- Keyset: the runs after the last one of the previous page (newest first).
AND (created_at, id) < (%(cursor_at)s::float8, %(cursor_id)s::text)

-- name: inbox_runs
-- A page of runs waiting for a person (an approval, a tool call in doubt, a budget to
-- raise), oldest first (schema 14's partial indexes: the same condition).
SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
       lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
       waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
FROM runs
WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%%' OR waiting_for LIKE 'doubt:%%'
                              OR waiting_for LIKE 'budget:%%')
  /*filters*/
ORDER BY updated_at, id LIMIT %(limit)s::bigint;

-- name: inbox_runs_cursor
-- Keyset: the inbox's runs after the last one of the previous page (oldest first).
AND (updated_at, id) > (%(cursor_at)s::float8, %(cursor_id)s::text)

-- name: usage_totals
-- Model usage per agent or per session (%(by)s) of the runs the page_runs_* filters (the
-- /*filters*/ mark) select: each run's model calls' step.completed events, read by the
-- events' key (run_id, seq); the usage recorded with a call (priced by tether) or its result's.
SELECT CASE WHEN %(by)s::text = 'session' THEN r.session_id ELSE r.agent END AS key,
       COUNT(DISTINCT r.id), COUNT(*),
       SUM(COALESCE((j #>> '{usage,cost}')::float8, (j #>> '{output,usage,cost}')::float8,
                    (j #>> '{output,usage,cost_usd}')::float8, 0)),
       SUM(COALESCE((j #>> '{usage,input_tokens}')::bigint,
                    (j #>> '{output,usage,input_tokens}')::bigint,
                    (j #>> '{output,usage,prompt_tokens}')::bigint, 0)),
       SUM(COALESCE((j #>> '{usage,output_tokens}')::bigint,
                    (j #>> '{output,usage,output_tokens}')::bigint,
                    (j #>> '{output,usage,completion_tokens}')::bigint, 0))
FROM runs AS r JOIN events AS e ON e.run_id = r.id
CROSS JOIN LATERAL (SELECT e.data::jsonb AS j) AS x
WHERE e.type = 'step.completed' AND j ->> 'kind' = 'llm' /*filters*/
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
       MIN(CASE WHEN COALESCE(available_at, created_at) <= %(now)s::double precision
                THEN COALESCE(available_at, created_at) END)
FROM runs WHERE status = 'queued'
GROUP BY queue;

-- name: gauge_in_doubt
-- Runs waiting for a person to resolve a tool call in doubt (the runs_inbox partial index).
SELECT COUNT(*) FROM runs
WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%%' OR waiting_for LIKE 'doubt:%%'
                              OR waiting_for LIKE 'budget:%%')
  AND waiting_for LIKE 'doubt:%%';
