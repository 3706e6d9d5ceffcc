-- tether schema 4 (SQLite): long-term memory (tether.memory), kept apart from run
-- state. One row per (namespace, key); the full-text index is an external-content
-- FTS5 table over memory_items.text, kept in sync by triggers in the writer's own
-- transaction. Needs SQLite built with FTS5 (CPython's sqlite3 is, on every
-- platform tether supports). Tokens: letters and digits, case-folded, accents kept,
-- as PostgreSQL's simple configuration.

CREATE TABLE memory_items (
    id         INTEGER PRIMARY KEY,            -- the FTS rowid
    namespace  TEXT NOT NULL,                  -- the parts, each followed by U+001F
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,                  -- JSON (tether.codec)
    text       TEXT NOT NULL,                  -- what full-text search sees
    embedding  BLOB,                           -- unit-length float32 vector (little-endian) or NULL
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,                           -- NULL: never expires
    UNIQUE (namespace, key)
);
CREATE INDEX memory_items_expires ON memory_items (expires_at) WHERE expires_at IS NOT NULL;

CREATE VIRTUAL TABLE memory_fts USING fts5(
    text, content='memory_items', content_rowid='id', tokenize='unicode61 remove_diacritics 0'
);

CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER memory_items_au AFTER UPDATE OF text ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
END;
