-- tether schema 7 (PostgreSQL), as sql/sqlite/0007_blob_kind.sql: what a blob is, so that
-- gc can sweep the snapshot pages no snapshot references any more. 'page': a snapshot
-- page, swept once unreferenced and untouched for gc's grace period; NULL: an artifact,
-- or a blob written before this schema and referenced by no snapshot (kept).
ALTER TABLE blobs ADD COLUMN kind TEXT;
UPDATE blobs SET kind = 'page'
WHERE sha256 IN (
    SELECT p.digest FROM snapshots AS s
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(s.data::jsonb -> 'pages') = 'array'
             THEN s.data::jsonb -> 'pages' ELSE '[]'::jsonb END) AS p(digest)
);
