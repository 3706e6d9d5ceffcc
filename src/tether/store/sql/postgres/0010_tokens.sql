-- tether schema 10 (PostgreSQL), as sql/sqlite/0010_tokens.sql: API tokens
-- (tether.services.identity). A token's secret is never stored: only the SHA-256 of the
-- whole plaintext token. A revoked token keeps its row (its name stays taken).

CREATE TABLE tokens (
    id           TEXT COLLATE "C" PRIMARY KEY,  -- the public part: tether_<id>_<secret>
    name         TEXT COLLATE "C" NOT NULL UNIQUE, -- the identity recorded for its decisions
    role         TEXT NOT NULL,                 -- viewer | approver | operator | admin
    tenant       TEXT COLLATE "C",              -- NULL: every tenant
    hash         TEXT COLLATE "C" NOT NULL UNIQUE, -- hex SHA-256 of the plaintext token
    created_at   DOUBLE PRECISION NOT NULL,
    revoked_at   DOUBLE PRECISION,              -- NULL: valid
    last_used_at DOUBLE PRECISION               -- at most once a minute (see touch_token)
);
