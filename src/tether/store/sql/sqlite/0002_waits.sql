-- tether schema 2 (SQLite): what a waiting run waits for, signals kept until a
-- wait takes them, cancel requests, and the audit log of refused operations.

ALTER TABLE runs ADD COLUMN waiting_for TEXT;  -- approval:NAME | signal:NAME | timer | doubt:KEY
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;

CREATE TABLE signals (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   TEXT NOT NULL,
    name     TEXT NOT NULL,
    payload  TEXT NOT NULL,                 -- JSON (tether.codec)
    sent_at  REAL NOT NULL,
    sender   TEXT,
    taken_seq INTEGER                       -- the event of the wait that took it; NULL: pending
);
CREATE INDEX signals_pending ON signals (run_id, name, id) WHERE taken_seq IS NULL;

CREATE TABLE audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT,
    at     REAL NOT NULL,
    actor  TEXT,
    action TEXT NOT NULL,                   -- e.g. approval.refused
    detail TEXT NOT NULL                    -- JSON
);
CREATE INDEX audit_run ON audit (run_id, id);
