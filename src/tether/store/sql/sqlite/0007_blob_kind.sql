-- tether schema 7 (SQLite): what a blob is, so that gc can sweep the snapshot pages no
-- snapshot references any more. 'page': a snapshot page (tether.snapshots), swept once
-- unreferenced and untouched for gc's grace period; NULL: an artifact, or a blob written
-- before this schema and referenced by no snapshot (kept: it may be an artifact).
ALTER TABLE blobs ADD COLUMN kind TEXT;
UPDATE blobs SET kind = 'page'
WHERE sha256 IN (
    SELECT j.value FROM snapshots, json_each(snapshots.data, '$.pages') AS j
    WHERE json_valid(snapshots.data) AND json_type(snapshots.data, '$.pages') = 'array'
);
