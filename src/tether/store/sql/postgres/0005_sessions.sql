-- tether schema 5 (PostgreSQL), as sql/sqlite/0005_sessions.sql: conversations. A
-- session owns ordered messages (and many runs, through runs.session_id); message
-- bodies are stored once by content hash; a compaction is a summary that replaces
-- messages 1..upto_seq in the prompt view while the messages themselves stay stored.

CREATE TABLE sessions (
    id         TEXT COLLATE "C" PRIMARY KEY,
    owner      TEXT COLLATE "C",                -- tenant / user the session belongs to
    created_at DOUBLE PRECISION NOT NULL,
    last_seq   BIGINT NOT NULL DEFAULT 0        -- the seq of its newest message (0: none)
);

CREATE TABLE message_bodies (
    sha256 TEXT COLLATE "C" PRIMARY KEY,        -- content address: SHA-256 of the canonical JSON
    size   BIGINT NOT NULL,                     -- bytes of body
    body   BYTEA NOT NULL                       -- JSON (tether.codec), maybe zlib: conversation.pack
);

CREATE TABLE messages (
    session_id TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,                 -- 1, 2, 3… per session, no gaps
    role       TEXT NOT NULL,                   -- system | user | assistant | tool
    sha256     TEXT COLLATE "C" NOT NULL,       -- the content, in message_bodies
    meta       TEXT NOT NULL DEFAULT '{}',      -- JSON (tether.codec)
    run_id     TEXT COLLATE "C",                -- the run that added it, if any…
    run_add    BIGINT,                          -- …as its k-th add: a replay adds it once
    at         DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX messages_run_add ON messages (session_id, run_id, run_add)
    WHERE run_id IS NOT NULL;

CREATE TABLE compactions (
    session_id    TEXT COLLATE "C" NOT NULL,
    upto_seq      BIGINT NOT NULL,              -- the summary replaces messages 1..upto_seq
    sha256        TEXT COLLATE "C" NOT NULL,    -- the summary, in message_bodies
    tokens_before BIGINT NOT NULL,              -- the prompt view's tokens before and after
    tokens_after  BIGINT NOT NULL,
    at            DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, upto_seq)
);

CREATE INDEX runs_session ON runs (session_id) WHERE session_id IS NOT NULL;
