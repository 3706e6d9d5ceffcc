-- tether schema 9 (SQLite), as sql/postgres/0009_blocked_keeps_dedup.sql: a blocked run (its
-- agent's code no longer matches its log; it goes on once the code is restored) still holds
-- its dedup key, as a queued, running or waiting run does: a second start with the same key
-- returns the blocked run instead of starting the same work again.
DROP INDEX IF EXISTS runs_dedup;
CREATE UNIQUE INDEX runs_dedup ON runs (queue, dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('queued', 'running', 'waiting', 'blocked');
