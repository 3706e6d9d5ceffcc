-- tether schema 14 (PostgreSQL), as sql/sqlite/0014_budget_inbox.sql: the approvals inbox
-- holds the runs waiting on their budget too (waiting_for 'budget:LIMIT': a person raises
-- it, tether budget / POST /api/runs/{id}/budget). Its partial indexes (schema 11) are
-- made again with that third kind in their condition, which inbox_runs repeats word for
-- word (a partial index serves a query whose condition implies the index's).
DROP INDEX runs_inbox;
DROP INDEX runs_owner_inbox;
CREATE INDEX runs_inbox ON runs (updated_at, id)
    WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%'
                                  OR waiting_for LIKE 'budget:%');
CREATE INDEX runs_owner_inbox ON runs (owner, updated_at, id)
    WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%'
                                  OR waiting_for LIKE 'budget:%');
