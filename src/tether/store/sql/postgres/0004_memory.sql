-- tether schema 4 (PostgreSQL), as sql/sqlite/0004_memory.sql: long-term memory
-- (tether.memory), kept apart from run state. Full-text search is a generated
-- tsvector column (the 'simple' configuration: no stemming, no stop words, like
-- SQLite's unicode61 tokenizer) with a GIN index.

CREATE TABLE memory_items (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace  TEXT COLLATE "C" NOT NULL,      -- the parts, each followed by U+001F
    key        TEXT COLLATE "C" NOT NULL,
    value      TEXT NOT NULL,                  -- JSON (tether.codec)
    text       TEXT NOT NULL,                  -- what full-text search sees
    tsv        TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED,
    embedding  BYTEA,                          -- unit-length float32 vector (little-endian) or NULL
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,               -- NULL: never expires
    UNIQUE (namespace, key)
);
CREATE INDEX memory_items_expires ON memory_items (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);
