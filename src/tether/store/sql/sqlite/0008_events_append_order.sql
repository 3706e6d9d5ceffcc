-- tether schema 8 (SQLite): events stored in the order they are appended.
--
-- Until schema 7 an event's rowid was its key, (runs.rk << 32) | seq, so a run's log was
-- one range of the table, and an append went into the middle of it: after the run's
-- last event, before the next run's first. With 1 KB events that split a full page at
-- almost every append (about 4 pages written per event, 40 µs per insert + commit
-- against 23 µs at the end of a table). Now the rowid is the append order, so an append
-- writes at the end of the table, and the key is a unique index: a run's log is a range
-- of that index, and a taken seq still fails on it. A transaction of 3 appends to
-- different runs wrote 6.4 pages in 64 µs, against 11.3 pages in 110 µs; reading a
-- 7-event log from a cold cache took 32 µs against 21 (bench/README.md, item 20).
--
-- The events of a database migrated here are copied in key order, so the logs written
-- before stay contiguous. The copy takes one pass over the table, in the migration's
-- transaction.
CREATE TABLE events_by_append (
    id     INTEGER PRIMARY KEY,             -- append order
    key    INTEGER NOT NULL,                -- (runs.rk << 32) | seq, as before
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,                   -- JSON (tether.codec)
    at     REAL NOT NULL,
    actor  TEXT
);
INSERT INTO events_by_append (key, type, data, at, actor)
SELECT key, type, data, at, actor FROM events ORDER BY key;
DROP TABLE events;
ALTER TABLE events_by_append RENAME TO events;
CREATE UNIQUE INDEX events_key ON events (key);
