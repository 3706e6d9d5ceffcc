-- Named queries of the boards (tether.store.board_rows) on SQLite (tables of
-- 0015_boards.sql). Each block: "-- name: <name>", then a one-line purpose, then the
-- statement. A write runs in BEGIN IMMEDIATE: SQLite's one writer makes lock_row's
-- read and the update one atomic step.

-- name: _row
-- The columns of a value or a change, in BoardRow's order.
tenant, board, key, version, value, run_id, pos, actor

-- name: by_run
-- The change a run's position made, if it made one (a replay after a crash).
SELECT {{_row}}, at FROM board_changes WHERE run_id = :run_id AND pos = :pos;

-- name: ensure_row
-- Make sure the key has a row to lock (version 0, no value: as if absent).
INSERT INTO board_values (tenant, board, key, version, value, updated_at)
VALUES (:tenant, :board, :key, 0, NULL, :now)
ON CONFLICT (tenant, board, key) DO NOTHING;

-- name: lock_row
-- The key's version and whether it holds a value, for this write (the writer lock holds it).
SELECT version, value IS NOT NULL FROM board_values
WHERE tenant = :tenant AND board = :board AND key = :key;

-- name: update_row
-- The key's new value (NULL: deleted) and version, and who wrote it.
UPDATE board_values
SET version = :version, value = :value, run_id = :run_id, pos = :pos, actor = :actor,
    updated_at = :now
WHERE tenant = :tenant AND board = :board AND key = :key;

-- name: insert_change
-- The change as a record of the board's history.
INSERT INTO board_changes (tenant, board, key, version, value, run_id, pos, actor, at)
VALUES (:tenant, :board, :key, :version, :value, :run_id, :pos, :actor, :now);

-- name: get_value
-- One key's current row (value NULL: deleted or never written).
SELECT {{_row}}, updated_at FROM board_values
WHERE tenant = :tenant AND board = :board AND key = :key;

-- name: board_values
-- Every key of a board that holds a value, by key.
SELECT {{_row}}, updated_at FROM board_values
WHERE tenant = :tenant AND board = :board AND value IS NOT NULL
ORDER BY key;

-- name: value_at
-- One key's newest change at or before :at (its value then).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = :tenant AND board = :board AND key = :key AND at <= :at
ORDER BY version DESC
LIMIT 1;

-- name: values_at
-- The newest change of each key of a board at or before :at, by key.
SELECT {{_row}}, at FROM board_changes AS c
WHERE tenant = :tenant AND board = :board AND at <= :at
  AND version = (SELECT MAX(version) FROM board_changes AS n
                 WHERE n.tenant = c.tenant AND n.board = c.board AND n.key = c.key
                   AND n.at <= :at)
ORDER BY key;

-- name: key_history
-- A key's changes after version :after, oldest first (at most :limit).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = :tenant AND board = :board AND key = :key AND version > :after
ORDER BY version
LIMIT :limit;

-- name: board_history
-- Every change of a board, oldest first (by time, then key and version; at most :limit).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = :tenant AND board = :board
ORDER BY at, key, version
LIMIT :limit;

-- name: list_boards
-- The boards of a tenant (:tenant NULL: every tenant): keys holding a value, last change.
SELECT tenant, board, SUM(CASE WHEN value IS NULL THEN 0 ELSE 1 END), MAX(updated_at)
FROM board_values
WHERE :tenant IS NULL OR tenant = :tenant
GROUP BY tenant, board
ORDER BY tenant, board;
