-- tether schema 3 (PostgreSQL), as sql/sqlite/0003_queue.sql: the run queue
-- (dedup, per-key limits, claim times) and the workers that claim from it.

ALTER TABLE runs ADD COLUMN dedup_key TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN concurrency_key TEXT COLLATE "C";  -- e.g. a tenant: limits per key
ALTER TABLE runs ADD COLUMN claimed_at DOUBLE PRECISION;       -- the last claim (rate limits)
-- one active run per (queue, dedup key); a finished run frees its key
CREATE UNIQUE INDEX runs_dedup ON runs (queue, dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('queued', 'running', 'waiting');
CREATE INDEX runs_claimable ON runs (queue, status, available_at);

CREATE TABLE workers (
    id           TEXT COLLATE "C" PRIMARY KEY, -- also the lease owner of its runs
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,                -- JSON list
    concurrency  INTEGER NOT NULL,
    started_at   DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stopping     INTEGER NOT NULL DEFAULT 0
);
