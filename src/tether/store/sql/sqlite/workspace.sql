-- Named queries of the workspace blobs (tether.store.workspace_rows) on SQLite: the file
-- contents of workspace checkpoints, as blobs of kind 'workspace' (schema 7's column).
-- Each block: "-- name: <name>", then a one-line purpose, then the statement.

-- name: put_blob
-- Store a file's bytes once as kind 'workspace' (touched if so already); a snapshot page
-- with the same bytes becomes a plain artifact (never swept); other kinds stay as they are.
INSERT INTO blobs (sha256, size, data, created_at, kind)
VALUES (:sha256, :size, :data, :now, 'workspace')
ON CONFLICT (sha256) DO UPDATE SET
    created_at = CASE WHEN blobs.kind = 'workspace' THEN :now ELSE blobs.created_at END,
    kind = CASE WHEN blobs.kind = 'page' THEN NULL ELSE blobs.kind END
WHERE blobs.kind IN ('workspace', 'page');

-- name: get_blob
-- The bytes of a digest (of any kind).
SELECT data FROM blobs WHERE sha256 = :sha256;

-- name: event_data
-- gc: the data of every workspace event (the manifests' changes) of every run.
SELECT data FROM events WHERE type = 'workspace';

-- name: old_blobs
-- gc: the workspace blobs not stored or touched since :before.
SELECT sha256, size FROM blobs WHERE kind = 'workspace' AND created_at < :before;

-- name: delete_blob
-- gc: delete a workspace blob unless a put touched it since :before.
DELETE FROM blobs WHERE sha256 = :sha256 AND kind = 'workspace' AND created_at < :before;
