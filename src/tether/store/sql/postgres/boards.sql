-- Named queries of the boards (tether.store.board_rows) on PostgreSQL (tables of
-- 0015_boards.sql), with the same names, parameters and results as sql/sqlite/boards.sql.
-- Each block: "-- name: <name>", then a one-line purpose, then the statement. A write
-- locks the key's row (lock_row: FOR UPDATE), so concurrent writers of a key take turns.

-- name: _row
-- The columns of a value or a change, in BoardRow's order.
tenant, board, key, version, value, run_id, pos, actor

-- name: by_run
-- The change a run's position made, if it made one (a replay after a crash).
SELECT {{_row}}, at FROM board_changes WHERE run_id = %(run_id)s AND pos = %(pos)s;

-- name: ensure_row
-- Make sure the key has a row to lock (version 0, no value: as if absent).
INSERT INTO board_values (tenant, board, key, version, value, updated_at)
VALUES (%(tenant)s, %(board)s, %(key)s, 0, NULL, %(now)s)
ON CONFLICT (tenant, board, key) DO NOTHING;

-- name: lock_row
-- The key's version and whether it holds a value, for this write (locked until the commit).
SELECT version, value IS NOT NULL FROM board_values
WHERE tenant = %(tenant)s AND board = %(board)s AND key = %(key)s
FOR UPDATE;

-- name: update_row
-- The key's new value (NULL: deleted) and version, and who wrote it.
UPDATE board_values
SET version = %(version)s, value = %(value)s, run_id = %(run_id)s, pos = %(pos)s,
    actor = %(actor)s, updated_at = %(now)s
WHERE tenant = %(tenant)s AND board = %(board)s AND key = %(key)s;

-- name: insert_change
-- The change as a record of the board's history.
INSERT INTO board_changes (tenant, board, key, version, value, run_id, pos, actor, at)
VALUES (%(tenant)s, %(board)s, %(key)s, %(version)s, %(value)s, %(run_id)s, %(pos)s,
        %(actor)s, %(now)s);

-- name: get_value
-- One key's current row (value NULL: deleted or never written).
SELECT {{_row}}, updated_at FROM board_values
WHERE tenant = %(tenant)s AND board = %(board)s AND key = %(key)s;

-- name: board_values
-- Every key of a board that holds a value, by key.
SELECT {{_row}}, updated_at FROM board_values
WHERE tenant = %(tenant)s AND board = %(board)s AND value IS NOT NULL
ORDER BY key;

-- name: value_at
-- One key's newest change at or before at (its value then).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = %(tenant)s AND board = %(board)s AND key = %(key)s AND at <= %(at)s
ORDER BY version DESC
LIMIT 1;

-- name: values_at
-- The newest change of each key of a board at or before at, by key.
SELECT {{_row}}, at FROM board_changes AS c
WHERE tenant = %(tenant)s AND board = %(board)s AND at <= %(at)s
  AND version = (SELECT MAX(version) FROM board_changes AS n
                 WHERE n.tenant = c.tenant AND n.board = c.board AND n.key = c.key
                   AND n.at <= %(at)s)
ORDER BY key;

-- name: key_history
-- A key's changes after version after, oldest first (at most limit).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = %(tenant)s AND board = %(board)s AND key = %(key)s AND version > %(after)s
ORDER BY version
LIMIT %(limit)s;

-- name: board_history
-- Every change of a board, oldest first (by time, then key and version; at most limit).
SELECT {{_row}}, at FROM board_changes
WHERE tenant = %(tenant)s AND board = %(board)s
ORDER BY at, key, version
LIMIT %(limit)s;

-- name: list_boards
-- The boards of a tenant (tenant NULL: every tenant): keys holding a value, last change.
SELECT tenant, board, SUM(CASE WHEN value IS NULL THEN 0 ELSE 1 END), MAX(updated_at)
FROM board_values
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
GROUP BY tenant, board
ORDER BY tenant, board;
