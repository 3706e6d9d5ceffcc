-- tether schema 17 (PostgreSQL): claims pass over the runs of versions a worker does not
-- serve (agents registered at given versions: docs/deploys.md), in claim_fast as in the
-- other claim statements. The function takes two more parameters (pinned, served: NULL
-- for a worker that serves every run), so this is a new overload; schema 13's stays for
-- processes of an older tether during an upgrade. (Written by
-- python -m tether.store.postgres.functions.)

CREATE OR REPLACE FUNCTION claim_fast(text, float8, jsonb, jsonb, bigint, text, float8) RETURNS TABLE (claimed_row text, new_epoch bigint, snapshot_row text, event_rows text)
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
      AND (available_at IS NULL OR available_at <= $2::float8) AND ($3::jsonb IS NULL
 OR NOT agent = ANY(ARRAY(SELECT jsonb_array_elements_text($3::jsonb)))
 OR EXISTS (SELECT 1 FROM jsonb_array_elements($4::jsonb) AS s(pair)
            WHERE s.pair->>0 = agent AND (s.pair->>1) IS NOT DISTINCT FROM version))
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $5::bigint
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = $1::text AND status = 'waiting' AND available_at <= $2::float8
      AND ($3::jsonb IS NULL
 OR NOT agent = ANY(ARRAY(SELECT jsonb_array_elements_text($3::jsonb)))
 OR EXISTS (SELECT 1 FROM jsonb_array_elements($4::jsonb) AS s(pair)
            WHERE s.pair->>0 = agent AND (s.pair->>1) IS NOT DISTINCT FROM version))
    ORDER BY priority DESC, available_at, created_at, id
    LIMIT $5::bigint
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, agent, version, status, code, created_at, updated_at, epoch, lease_owner,
           lease_expires, parent_id, fork_seq, session_id, owner, queue, priority, available_at,
           waiting_for, cancel_requested, dedup_key, concurrency_key, claimed_at
    FROM runs
    WHERE queue = $1::text AND status = 'running'
      AND (CASE WHEN lease_owner IS NULL THEN 0 ELSE lease_expires END) < $2::float8
      AND ($3::jsonb IS NULL
 OR NOT agent = ANY(ARRAY(SELECT jsonb_array_elements_text($3::jsonb)))
 OR EXISTS (SELECT 1 FROM jsonb_array_elements($4::jsonb) AS s(pair)
            WHERE s.pair->>0 = agent AND (s.pair->>1) IS NOT DISTINCT FROM version))
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $5::bigint
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM (SELECT * FROM queued UNION ALL SELECT * FROM due
                   UNION ALL SELECT * FROM expired) AS claimable
    ORDER BY priority DESC, COALESCE(available_at, created_at), created_at, id
    LIMIT $5::bigint
), taken AS (
    UPDATE runs AS r SET status = 'running', epoch = r.epoch + 1, lease_owner = $6::text,
           lease_expires = $7::float8, claimed_at = $2::float8,
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
