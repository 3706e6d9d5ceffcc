-- tether schema 2 (PostgreSQL), as sql/sqlite/0002_waits.sql: what a waiting run
-- waits for, signals kept until a wait takes them, cancel requests, and the
-- audit log of refused operations.

ALTER TABLE runs ADD COLUMN waiting_for TEXT COLLATE "C";  -- approval:NAME | signal:NAME | timer | doubt:KEY
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;

CREATE TABLE signals (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    TEXT COLLATE "C" NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    payload   TEXT NOT NULL,                -- JSON (tether.codec)
    sent_at   DOUBLE PRECISION NOT NULL,
    sender    TEXT,
    taken_seq BIGINT                        -- the event of the wait that took it; NULL: pending
);
CREATE INDEX signals_pending ON signals (run_id, name, id) WHERE taken_seq IS NULL;

CREATE TABLE audit (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT COLLATE "C",
    at     DOUBLE PRECISION NOT NULL,
    actor  TEXT,
    action TEXT NOT NULL,                   -- e.g. approval.refused
    detail TEXT NOT NULL                    -- JSON
);
CREATE INDEX audit_run ON audit (run_id, id);
