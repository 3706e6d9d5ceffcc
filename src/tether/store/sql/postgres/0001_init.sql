-- tether schema 1 (PostgreSQL): runs, their append-only event logs, snapshots,
-- content-addressed blobs and the effects table; the same tables, columns and
-- meanings as sql/sqlite/0001_init.sql. The tables live in their own schema
-- (the connection's search_path; ``tether`` unless the URL says ?schema=…).
-- Times are seconds since the epoch (DOUBLE PRECISION, as SQLite's REAL); JSON
-- stays TEXT so that it round-trips byte for byte. Ids and other keys compared
-- or ordered by tether use COLLATE "C": byte order, as in SQLite, whatever the
-- database's default collation. Forward-only: a later schema is a new numbered
-- file, never an edit of this one.

CREATE TABLE tether_meta (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE runs (
    id            TEXT COLLATE "C" PRIMARY KEY,
    agent         TEXT COLLATE "C" NOT NULL,
    version       TEXT,
    status        TEXT COLLATE "C" NOT NULL,    -- queued | running | waiting | completed | failed | cancelled
    code          TEXT NOT NULL DEFAULT '{}',   -- where the agent's code lives (module, qualname, file)
    created_at    DOUBLE PRECISION NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL,
    epoch         BIGINT NOT NULL DEFAULT 0,    -- fencing token: bumped by every claim
    lease_owner   TEXT COLLATE "C",             -- NULL: nobody executes the run
    lease_expires DOUBLE PRECISION,
    parent_id     TEXT COLLATE "C",             -- lineage: forked from
    fork_seq      BIGINT,
    session_id    TEXT COLLATE "C",
    owner         TEXT COLLATE "C",             -- tenant / actor the run belongs to
    queue         TEXT COLLATE "C",
    priority      BIGINT NOT NULL DEFAULT 0,
    available_at  DOUBLE PRECISION              -- when a queued or waiting run may be claimed
);
CREATE INDEX runs_status ON runs (status, agent);
CREATE INDEX runs_lease ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE events (
    run_id TEXT COLLATE "C" NOT NULL,
    seq    BIGINT NOT NULL,                     -- 1, 2, 3… per run, no gaps
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,                       -- JSON (tether.codec)
    at     DOUBLE PRECISION NOT NULL,
    actor  TEXT,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE snapshots (
    run_id TEXT COLLATE "C" NOT NULL,
    seq    BIGINT NOT NULL,                     -- the state after this event
    data   TEXT NOT NULL,                       -- JSON of RunState (tether.state.to_data)
    at     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE blobs (
    sha256     TEXT COLLATE "C" PRIMARY KEY,    -- content address
    size       BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE effects (
    key        TEXT COLLATE "C" PRIMARY KEY,    -- {run_id}:{position}:{tool}:{args_hash}
    run_id     TEXT COLLATE "C" NOT NULL,
    position   BIGINT NOT NULL,
    tool       TEXT NOT NULL,
    status     TEXT NOT NULL,                   -- intent | completed | failed
    result     TEXT,                            -- JSON (tether.codec)
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX effects_run ON effects (run_id);
