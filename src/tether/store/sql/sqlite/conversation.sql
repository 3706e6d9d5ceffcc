-- Named queries of the conversation rows (tether.store.context_rows) on SQLite: sessions,
-- messages, compactions. Each block: "-- name: <name>", then a one-line purpose, then the
-- statement.

-- name: create_session
-- Create a session unless its id exists (get-or-create reads it back).
INSERT INTO sessions (id, owner, created_at, last_seq) VALUES (:id, :owner, :now, 0)
ON CONFLICT (id) DO NOTHING;

-- name: get_session
-- One session row.
SELECT id, owner, created_at, last_seq FROM sessions WHERE id = :id;

-- name: next_seq
-- Take the session's next message seq (locks the session row until COMMIT).
UPDATE sessions SET last_seq = last_seq + 1 WHERE id = :id RETURNING last_seq;

-- name: put_body
-- Store a body once by its content hash (an identical body is already there).
INSERT INTO message_bodies (sha256, size, body) VALUES (:sha, :size, :body)
ON CONFLICT (sha256) DO NOTHING;

-- name: get_body
-- One body by content hash.
SELECT body FROM message_bodies WHERE sha256 = :sha;

-- name: insert_message
-- Append a message at its seq; no row when this run's k-th add (run_id, run_add) exists.
INSERT INTO messages (session_id, seq, role, sha256, meta, run_id, run_add, at)
VALUES (:id, :seq, :role, :sha, :meta, :run_id, :run_add, :now)
ON CONFLICT DO NOTHING;

-- name: message_by_run_add
-- The message a run already added as its k-th add.
SELECT m.seq, m.role, b.body, m.sha256, m.meta, m.at, m.run_id
FROM messages m JOIN message_bodies b ON b.sha256 = m.sha256
WHERE m.session_id = :id AND m.run_id = :run_id AND m.run_add = :run_add;

-- name: read_messages
-- A session's messages with after < seq <= upto, in order, with their bodies.
SELECT m.seq, m.role, b.body, m.sha256, m.meta, m.at, m.run_id
FROM messages m JOIN message_bodies b ON b.sha256 = m.sha256
WHERE m.session_id = :id AND m.seq > :after AND m.seq <= :upto
ORDER BY m.seq;

-- name: message_keys
-- What identifies each message after a seq (for prompt references), without its body.
SELECT seq, role, sha256, meta FROM messages WHERE session_id = :id AND seq > :after ORDER BY seq;

-- name: latest_compaction
-- The newest compaction of a session, with its summary.
SELECT c.upto_seq, b.body, c.sha256, c.tokens_before, c.tokens_after, c.at
FROM compactions c JOIN message_bodies b ON b.sha256 = c.sha256
WHERE c.session_id = :id ORDER BY c.upto_seq DESC LIMIT 1;

-- name: list_compactions
-- Every compaction of a session, oldest first, with its summary.
SELECT c.upto_seq, b.body, c.sha256, c.tokens_before, c.tokens_after, c.at
FROM compactions c JOIN message_bodies b ON b.sha256 = c.sha256
WHERE c.session_id = :id ORDER BY c.upto_seq;

-- name: insert_compaction
-- Record a summary replacing messages 1..upto_seq (in the transaction that stores its body).
INSERT INTO compactions (session_id, upto_seq, sha256, tokens_before, tokens_after, at)
VALUES (:id, :upto, :sha, :before, :after, :now);

-- name: session_runs
-- The runs of a session, oldest first.
SELECT id FROM runs WHERE session_id = :id ORDER BY created_at, id;
