-- Named queries of the artifact rows (tether.store.context_rows) on PostgreSQL, as
-- sql/sqlite/artifacts.sql: content-addressed bytes in the blobs table of schema 1. Each
-- block: "-- name: <name>", then a one-line purpose, then the statement.

-- name: put_blob
-- Store bytes under their SHA-256 once; an existing digest is kept, and never swept by gc
-- again (an artifact, even if a snapshot page had the same bytes).
INSERT INTO blobs (sha256, size, data, created_at)
VALUES (%(sha256)s, %(size)s, %(data)s, %(now)s)
ON CONFLICT (sha256) DO UPDATE SET kind = NULL WHERE blobs.kind IS NOT NULL;

-- name: get_blob
-- The stored size and bytes of a digest.
SELECT size, data FROM blobs WHERE sha256 = %(sha256)s;

-- name: blob_exists
-- Whether a digest is stored.
SELECT 1 FROM blobs WHERE sha256 = %(sha256)s;

-- name: delete_blob
-- Delete a digest's bytes (for every holder of a reference).
DELETE FROM blobs WHERE sha256 = %(sha256)s;
