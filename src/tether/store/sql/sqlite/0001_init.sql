-- tether schema 1 (SQLite): runs, their append-only event logs, snapshots,
-- content-addressed blobs and the effects table. Forward-only: a later schema
-- is a new numbered file, never an edit of this one.

CREATE TABLE tether_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE runs (
    rk            INTEGER PRIMARY KEY,      -- the run's compact key: events are keyed by it
    id            TEXT NOT NULL UNIQUE,
    agent         TEXT NOT NULL,
    version       TEXT,
    status        TEXT NOT NULL,            -- queued | running | waiting | completed | failed | cancelled
    code          TEXT NOT NULL DEFAULT '{}', -- where the agent's code lives (module, qualname, file)
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    epoch         INTEGER NOT NULL DEFAULT 0, -- fencing token: bumped by every claim
    lease_owner   TEXT,                     -- NULL: nobody executes the run
    lease_expires REAL,
    parent_id     TEXT,                     -- lineage: forked from
    fork_seq      INTEGER,
    session_id    TEXT,
    owner         TEXT,                     -- tenant / actor the run belongs to
    queue         TEXT,
    priority      INTEGER NOT NULL DEFAULT 0,
    available_at  REAL                      -- when a queued or waiting run may be claimed
);
CREATE INDEX runs_status ON runs (status, agent);
CREATE INDEX runs_lease ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

-- One B-tree, no secondary index: key = (runs.rk << 32) | seq, so an append is a single
-- rowid insert (the cost of the floor) and a run's log is stored contiguously. seq is
-- 1, 2, 3… per run with no gaps, below 2^32.
CREATE TABLE events (
    key    INTEGER PRIMARY KEY,
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,                   -- JSON (tether.codec)
    at     REAL NOT NULL,
    actor  TEXT
);

CREATE TABLE snapshots (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,                -- the state after this event
    data   TEXT NOT NULL,                   -- JSON of RunState (tether.state.to_data)
    at     REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE blobs (
    sha256     TEXT PRIMARY KEY,            -- content address
    size       INTEGER NOT NULL,
    data       BLOB NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE effects (
    key        TEXT PRIMARY KEY,            -- {run_id}:{position}:{tool}:{args_hash}
    run_id     TEXT NOT NULL,
    position   INTEGER NOT NULL,
    tool       TEXT NOT NULL,
    status     TEXT NOT NULL,               -- intent | completed | failed
    result     TEXT,                        -- JSON (tether.codec)
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX effects_run ON effects (run_id);
