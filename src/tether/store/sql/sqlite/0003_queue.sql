-- tether schema 3 (SQLite): the run queue (dedup, per-key limits, claim times) and the
-- workers that claim from it.

ALTER TABLE runs ADD COLUMN dedup_key TEXT;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;  -- e.g. a tenant: limits per key
ALTER TABLE runs ADD COLUMN claimed_at REAL;        -- the last claim (rate limits)
-- one active run per (queue, dedup key); a finished run frees its key
CREATE UNIQUE INDEX runs_dedup ON runs (queue, dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('queued', 'running', 'waiting');
CREATE INDEX runs_claimable ON runs (queue, status, available_at);

CREATE TABLE workers (
    id           TEXT PRIMARY KEY,             -- also the lease owner of its runs
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,                -- JSON list
    concurrency  INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopping     INTEGER NOT NULL DEFAULT 0
);
