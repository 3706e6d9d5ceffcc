-- tether schema 10 (SQLite): API tokens (tether.services.identity). A token's secret is
-- never stored: only the SHA-256 of the whole plaintext token (tokens are 32 random bytes,
-- so a fast hash is right: there is nothing to guess). A revoked token keeps its row (its
-- name stays taken, and audit records that name it still mean someone).

CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,              -- the public part: tether_<id>_<secret>
    name         TEXT NOT NULL UNIQUE,          -- the identity recorded for its decisions
    role         TEXT NOT NULL,                 -- viewer | approver | operator | admin
    tenant       TEXT,                          -- NULL: every tenant
    hash         TEXT NOT NULL UNIQUE,          -- hex SHA-256 of the plaintext token
    created_at   REAL NOT NULL,
    revoked_at   REAL,                          -- NULL: valid
    last_used_at REAL                           -- at most once a minute (see touch_token)
);
