-- Named queries of the artifact rows (tether.store.context_rows) on SQLite:
-- content-addressed bytes in the blobs table of schema 1. Each block: "-- name: <name>",
-- then a one-line purpose, then the statement.

-- name: put_blob
-- Store bytes under their SHA-256 once; an existing digest is kept, and never swept by gc
-- again (an artifact, even if a snapshot page had the same bytes).
INSERT INTO blobs (sha256, size, data, created_at) VALUES (:sha256, :size, :data, :now)
ON CONFLICT (sha256) DO UPDATE SET kind = NULL WHERE blobs.kind IS NOT NULL;

-- name: get_blob
-- The stored size and bytes of a digest.
SELECT size, data FROM blobs WHERE sha256 = :sha256;

-- name: blob_exists
-- Whether a digest is stored.
SELECT 1 FROM blobs WHERE sha256 = :sha256;

-- name: delete_blob
-- Delete a digest's bytes (for every holder of a reference).
DELETE FROM blobs WHERE sha256 = :sha256;

-- name: delete_claims
-- The unscoped delete: no tenant claims the digest any more (its bytes are gone).
DELETE FROM artifact_claims WHERE sha256 = :sha256;

-- name: put_claimed_blob
-- A tenant's put: store bytes once as kind 'claimed' (a snapshot page with the same bytes
-- becomes claimed, so gc keeps it; an unscoped artifact, kind NULL, stays one).
INSERT INTO blobs (sha256, size, data, created_at, kind)
VALUES (:sha256, :size, :data, :now, 'claimed')
ON CONFLICT (sha256) DO UPDATE SET kind = 'claimed' WHERE blobs.kind = 'page';

-- name: add_claim
-- A tenant claims a digest (kept as it is if already claimed).
INSERT INTO artifact_claims (tenant, sha256, created_at) VALUES (:tenant, :sha256, :now)
ON CONFLICT (tenant, sha256) DO NOTHING;

-- name: has_claim
-- Whether the tenant claims the digest.
SELECT 1 FROM artifact_claims WHERE tenant = :tenant AND sha256 = :sha256;

-- name: delete_claim
-- A tenant's delete: its claim alone.
DELETE FROM artifact_claims WHERE tenant = :tenant AND sha256 = :sha256;

-- name: release_blob
-- After a tenant's delete: a claimed blob no tenant claims any more becomes a page, which
-- gc sweeps after its grace period unless a snapshot references the same bytes.
UPDATE blobs SET kind = 'page', created_at = :now
WHERE sha256 = :sha256 AND kind = 'claimed'
  AND NOT EXISTS (SELECT 1 FROM artifact_claims WHERE sha256 = :sha256);
