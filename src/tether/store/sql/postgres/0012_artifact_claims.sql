-- tether schema 12 (PostgreSQL), as sql/sqlite/0012_artifact_claims.sql: which tenant
-- stored which artifact (tether.context.tenant_artifacts). A tenant's view reads, tests
-- and deletes only the digests it has a claim on. A blob that tenants put and nothing
-- unscoped did has kind 'claimed' (never swept by gc); when its last claim is deleted it
-- becomes a 'page' again: gc sweeps it after its grace period unless a snapshot
-- references the same bytes.
CREATE TABLE artifact_claims (
    tenant     TEXT COLLATE "C" NOT NULL,
    sha256     TEXT COLLATE "C" NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, sha256)
);
-- whether any tenant still claims a digest (a tenant's delete, the unscoped delete)
CREATE INDEX artifact_claims_sha256 ON artifact_claims (sha256);
