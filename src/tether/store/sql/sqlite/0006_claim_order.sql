-- tether schema 6 (SQLite): indexes in the claim's order, so that a claim reads the few
-- best runs instead of sorting every claimable run of the queue (O(queue depth) per
-- claim before). A claim takes the best of three ordered scans: queued runs, waiting runs
-- whose time is due, and running runs whose lease has expired.
CREATE INDEX runs_queued_order ON runs
    (queue, priority DESC, COALESCE(available_at, created_at), created_at, id)
    WHERE status = 'queued';
CREATE INDEX runs_waiting_due ON runs (queue, priority DESC, available_at, created_at, id)
    WHERE status = 'waiting' AND available_at IS NOT NULL;
