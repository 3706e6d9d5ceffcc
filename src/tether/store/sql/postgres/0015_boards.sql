-- tether schema 15 (PostgreSQL), as sql/sqlite/0015_boards.sql: boards, the keyed and
-- versioned state that several runs and plain code share (tether.context.boards).
-- board_values holds each key's current value and version (a deleted key keeps its
-- row: value NULL, its version counted on); board_changes holds every change, with the
-- version it made, the run and position that made it (inside a run) and who. Versions
-- of a key are 1, 2, 3… without a gap: a write takes the next under the row's lock
-- (SELECT … FOR UPDATE). A run's position writes once: a replay after a crash finds
-- the change it made. tenant is '' outside tenants.
CREATE TABLE board_values (
    tenant     TEXT COLLATE "C" NOT NULL,
    board      TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    version    BIGINT NOT NULL,
    value      TEXT,
    run_id     TEXT,
    pos        BIGINT,
    actor      TEXT,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, board, key)
);
CREATE TABLE board_changes (
    tenant  TEXT COLLATE "C" NOT NULL,
    board   TEXT COLLATE "C" NOT NULL,
    key     TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    value   TEXT,
    run_id  TEXT,
    pos     BIGINT,
    actor   TEXT,
    at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, board, key, version)
);
-- a run's position changes a board once (a replay finds the change it made)
CREATE UNIQUE INDEX board_changes_run ON board_changes (run_id, pos) WHERE run_id IS NOT NULL;
