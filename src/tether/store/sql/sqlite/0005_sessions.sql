-- tether schema 5 (SQLite): conversations. A session owns ordered messages (and
-- many runs, through runs.session_id); message bodies are stored once by content
-- hash; a compaction is a summary that replaces messages 1..upto_seq in the prompt
-- view while the messages themselves stay stored.

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    owner      TEXT,                        -- tenant / user the session belongs to
    created_at REAL NOT NULL,
    last_seq   INTEGER NOT NULL DEFAULT 0   -- the seq of its newest message (0: none)
);

CREATE TABLE message_bodies (
    sha256 TEXT PRIMARY KEY,                -- content address: SHA-256 of the canonical JSON
    size   INTEGER NOT NULL,                -- bytes of body
    body   BLOB NOT NULL                    -- JSON (tether.codec), maybe zlib: conversation.pack
) WITHOUT ROWID;                            -- the hash is the key: stored once, not twice

CREATE TABLE messages (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,            -- 1, 2, 3… per session, no gaps
    role       TEXT NOT NULL,               -- system | user | assistant | tool
    sha256     TEXT NOT NULL,               -- the content, in message_bodies
    meta       TEXT NOT NULL DEFAULT '{}',  -- JSON (tether.codec)
    run_id     TEXT,                        -- the run that added it, if any…
    run_add    INTEGER,                     -- …as its k-th add: a replay adds it once
    at         REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;                            -- keyed by (session_id, seq) alone: no second copy
CREATE UNIQUE INDEX messages_run_add ON messages (session_id, run_id, run_add)
    WHERE run_id IS NOT NULL;

CREATE TABLE compactions (
    session_id    TEXT NOT NULL,
    upto_seq      INTEGER NOT NULL,         -- the summary replaces messages 1..upto_seq
    sha256        TEXT NOT NULL,            -- the summary, in message_bodies
    tokens_before INTEGER NOT NULL,         -- the prompt view's tokens before and after
    tokens_after  INTEGER NOT NULL,
    at            REAL NOT NULL,
    PRIMARY KEY (session_id, upto_seq)
);

CREATE INDEX runs_session ON runs (session_id) WHERE session_id IS NOT NULL;
