-- tether schema 11 (SQLite): what the run list and the approvals inbox read (the store's
-- page_runs and inbox_runs; tether serve's /api/runs and /api/approvals). Newest first with
-- a keyset cursor (created_at, id): each index below gives one filter's page as a range
-- read backwards, however many runs the database holds. The tenant is runs.owner.
CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_status_created ON runs (status, created_at, id);
CREATE INDEX runs_agent_created ON runs (agent, created_at, id);
CREATE INDEX runs_owner_created ON runs (owner, created_at, id) WHERE owner IS NOT NULL;
CREATE INDEX runs_owner_status_created ON runs (owner, status, created_at, id)
    WHERE owner IS NOT NULL;
-- the inbox: runs waiting for a person (an approval, or a tool call in doubt), oldest
-- request first; a partial index, so it holds those runs alone whatever else waits
CREATE INDEX runs_inbox ON runs (updated_at, id)
    WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%');
CREATE INDEX runs_owner_inbox ON runs (owner, updated_at, id)
    WHERE status = 'waiting' AND (waiting_for LIKE 'approval:%' OR waiting_for LIKE 'doubt:%');
