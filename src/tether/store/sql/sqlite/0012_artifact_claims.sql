-- tether schema 12 (SQLite): which tenant stored which artifact (tether.context.
-- tenant_artifacts). A tenant's view reads, tests and deletes only the digests it has a
-- claim on; another tenant's digest is as unknown to it as a digest never stored. The
-- bytes stay content-addressed and stored once (blobs, or an artifact directory). A blob
-- that tenants put and nothing unscoped did has kind 'claimed' (never swept by gc);
-- when its last claim is deleted it becomes a 'page' again: gc sweeps it after its grace
-- period unless a snapshot references the same bytes.
CREATE TABLE artifact_claims (
    tenant     TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, sha256)
);
-- whether any tenant still claims a digest (a tenant's delete, the unscoped delete)
CREATE INDEX artifact_claims_sha256 ON artifact_claims (sha256);
