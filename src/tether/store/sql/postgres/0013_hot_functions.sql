-- tether schema 13 (PostgreSQL): the hot statements of queries.sql (the appends, load_run,
-- claim_fast) as PL/pgSQL functions of the same names, for connections that prepare
-- nothing (behind a transaction pooler: tether.store.postgres.functions). Sent whole, a
-- statement is parsed and planned at every execution; a function's statements are planned
-- once per server connection, which the pooler keeps. Each body is its statement with $n
-- for its parameters; the function's own settings (no session state): the search_path of
-- this migration (tether's schema: callers behind a pooler set none) and the generic plans
-- a direct connection uses. Written by `python -m tether.store.postgres.functions`; a
-- statement changed later needs a new migration that replaces its function (a test checks).
CREATE OR REPLACE FUNCTION append_event(bigint, text, text, float8, text, text, bigint, bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE n bigint;
BEGIN
INSERT INTO events (run_id, seq, type, data, at, actor)
SELECT id, $1::bigint, $2::text, $3::text, $4::float8, $5::text
FROM runs WHERE id = $6::text AND epoch = $7::bigint
  AND ($8::bigint = 0 OR EXISTS (
      SELECT 1 FROM events WHERE run_id = $6::text AND seq = $8::bigint))
FOR NO KEY UPDATE;
GET DIAGNOSTICS n = ROW_COUNT;
RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION append_event_effect(text, bigint, bigint, bigint, text, text, float8, text, text, text, bigint, text, text, text, float8) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH fenced AS (
    SELECT id FROM runs WHERE id = $1::text AND epoch = $2::bigint
      AND ($3::bigint = 0 OR EXISTS (
          SELECT 1 FROM events WHERE run_id = $1::text AND seq = $3::bigint))
    FOR NO KEY UPDATE
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT fenced.id, $4::bigint, $5::text, $6::text, $7::float8,
           $8::text
    FROM fenced
    RETURNING seq
), effected AS (
    INSERT INTO effects (key, run_id, position, tool, status, result, created_at, updated_at)
    SELECT $9::text, $10::text, $11::bigint, $12::text,
           $13::text, $14::text, $15::float8, $15::float8
    FROM fenced
    ON CONFLICT (key) DO UPDATE SET status = excluded.status, result = excluded.result,
                                    updated_at = excluded.updated_at
    RETURNING key
)
SELECT count(*) FROM fenced;
END
$fn$;

CREATE OR REPLACE FUNCTION append_event_transition(text, bigint, bigint, bigint, text, text, float8, text, text, float8, float8, text, bool) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH fenced AS (
    SELECT id FROM runs WHERE id = $1::text AND epoch = $2::bigint
      AND ($3::bigint = 0 OR EXISTS (
          SELECT 1 FROM events WHERE run_id = $1::text AND seq = $3::bigint))
    FOR NO KEY UPDATE
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT fenced.id, $4::bigint, $5::text, $6::text, $7::float8,
           $8::text
    FROM fenced
    RETURNING seq
), moved AS (
    UPDATE runs SET status = $9::text, updated_at = $10::float8,
           available_at = $11::float8, waiting_for = $12::text,
           lease_owner = CASE WHEN $13::bool THEN NULL ELSE lease_owner END,
           lease_expires = CASE WHEN $13::bool THEN NULL ELSE lease_expires END
    WHERE id = (SELECT id FROM fenced)
    RETURNING id
)
SELECT count(*) FROM fenced;
END
$fn$;

CREATE OR REPLACE FUNCTION append_events_transition(text, bigint, bigint, bigint, text[], text[], float8[], text[], text, float8, float8, text, bool) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH fenced AS (
    SELECT id FROM runs WHERE id = $1::text AND epoch = $2::bigint
      AND ($3::bigint = 0 OR EXISTS (
          SELECT 1 FROM events WHERE run_id = $1::text AND seq = $3::bigint))
    FOR NO KEY UPDATE
), ok AS (
    SELECT id FROM fenced
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT ok.id, $4::bigint + e.n, e.type, e.data, e.at, e.actor
    FROM ok, unnest($5::text[], $6::text[], $7::float8[],
                    $8::text[]) WITH ORDINALITY AS e (type, data, at, actor, n)
    RETURNING seq
), moved AS (
    UPDATE runs SET status = $9::text, updated_at = $10::float8,
           available_at = $11::float8, waiting_for = $12::text,
           lease_owner = CASE WHEN $13::bool THEN NULL ELSE lease_owner END,
           lease_expires = CASE WHEN $13::bool THEN NULL ELSE lease_expires END
    WHERE id = (SELECT id FROM ok) AND $9::text IS NOT NULL
    RETURNING id
)
SELECT count(*) FROM fenced;
END
$fn$;

CREATE OR REPLACE FUNCTION append_events(text, bigint, bigint, bigint[], bigint[], bigint, text[], text[], float8[], text[], text, float8, float8, text, bool, text[], text[], bigint[], text[], text[], text[], text, bigint, text, float8) RETURNS TABLE (n_fenced bigint, n_ok bigint)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH fenced AS (
    SELECT id FROM runs WHERE id = $1::text AND epoch = $2::bigint
      AND ($3::bigint = 0 OR EXISTS (
          SELECT 1 FROM events WHERE run_id = $1::text AND seq = $3::bigint))
    FOR NO KEY UPDATE
), takeable AS (
    SELECT s.id, t.seq FROM signals s
    JOIN unnest($4::bigint[], $5::bigint[]) AS t (id, seq) ON s.id = t.id
    WHERE s.taken_seq IS NULL
    FOR UPDATE OF s
), ok AS (
    SELECT id FROM fenced
    WHERE (SELECT count(DISTINCT id) FROM takeable) = cardinality($4::bigint[])
), logged AS (
    INSERT INTO events (run_id, seq, type, data, at, actor)
    SELECT ok.id, $6::bigint + e.n, e.type, e.data, e.at, e.actor
    FROM ok, unnest($7::text[], $8::text[], $9::float8[],
                    $10::text[]) WITH ORDINALITY AS e (type, data, at, actor, n)
    RETURNING seq
), moved AS (
    UPDATE runs SET status = $11::text, updated_at = $12::float8,
           available_at = $13::float8, waiting_for = $14::text,
           lease_owner = CASE WHEN $15::bool THEN NULL ELSE lease_owner END,
           lease_expires = CASE WHEN $15::bool THEN NULL ELSE lease_expires END
    WHERE id = (SELECT id FROM ok) AND $11::text IS NOT NULL
    RETURNING id
), effected AS (
    INSERT INTO effects (key, run_id, position, tool, status, result, created_at, updated_at)
    SELECT w.key, w.run_id, w.position, w.tool, w.status, w.result,
           $12::float8, $12::float8
    FROM ok, unnest($16::text[], $17::text[], $18::bigint[],
                    $19::text[], $20::text[], $21::text[])
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
    SELECT $22::text, $23::bigint, $24::text, $25::float8
    FROM ok WHERE $24::text IS NOT NULL
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING seq
)
SELECT (SELECT count(*) FROM fenced), (SELECT count(*) FROM ok);
END
$fn$;

CREATE OR REPLACE FUNCTION load_run(text, bigint) RETURNS TABLE (run_row text, snapshot_row text, event_rows text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
SELECT
    (SELECT row_to_json(r)::text FROM (
        SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
               lease_expires, parent_id, fork_seq, session_id, owner, queue, priority,
               available_at, waiting_for, cancel_requested, dedup_key, concurrency_key,
               claimed_at
        FROM runs WHERE id = $1::text) AS r),
    (SELECT json_build_array(run_id, seq, data, at)::text FROM snapshots
     WHERE run_id = $1::text AND seq <= $2::bigint ORDER BY seq DESC LIMIT 1),
    (SELECT json_agg(json_build_array(run_id, seq, type, data, at, actor) ORDER BY seq)::text
     FROM events
     WHERE run_id = $1::text AND seq <= $2::bigint
       AND seq > COALESCE((SELECT max(seq) FROM snapshots
                           WHERE run_id = $1::text AND seq <= $2::bigint), 0));
END
$fn$;

CREATE OR REPLACE FUNCTION claim_fast(text, float8, bigint, text, float8) RETURNS TABLE (claimed_row text, new_epoch bigint, snapshot_row text, event_rows text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH queued AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = $1::text AND status = 'queued'
      AND (available_at IS NULL OR available_at <= $2::float8)
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = $1::text AND status = 'waiting' AND available_at <= $2::float8
    ORDER BY priority DESC, available_at, created_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = $1::text AND status = 'running'
      AND (CASE WHEN lease_owner IS NULL THEN 0 ELSE lease_expires END) < $2::float8
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM (SELECT * FROM queued UNION ALL SELECT * FROM due
                   UNION ALL SELECT * FROM expired) AS claimable
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $3::bigint
), taken AS (
    UPDATE runs AS r SET status = 'running', epoch = r.epoch + 1, lease_owner = $4::text,
           lease_expires = $5::float8, claimed_at = $2::float8,
           updated_at = $2::float8, waiting_for = NULL
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
END
$fn$;
