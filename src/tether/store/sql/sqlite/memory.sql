-- Named queries of the memory rows (tether.store.context_rows) on SQLite (tables of
-- 0004_memory.sql). Each block: "-- name: <name>", then a one-line purpose, then the
-- statement.
--
-- Shared parameters: :lo and :hi bound a namespace prefix (:hi NULL: no upper
-- bound); :now hides expired items; :filter is a JSON object of top-level fields
-- that must be equal (NULL: no filter). Numbers compare as numbers (1 = 1.0),
-- other JSON types only with their own type (true is not 1).

-- name: put_item
-- Insert or replace one item; an expired row it replaces counts as new (created_at).
INSERT INTO memory_items (namespace, key, value, text, embedding, created_at, updated_at,
                          expires_at)
VALUES (:namespace, :key, :value, :text, :embedding, :now, :now, :expires_at)
ON CONFLICT (namespace, key) DO UPDATE SET
    value = excluded.value,
    text = excluded.text,
    embedding = excluded.embedding,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    created_at = CASE WHEN memory_items.expires_at <= excluded.updated_at
                      THEN excluded.created_at ELSE memory_items.created_at END
RETURNING created_at;

-- name: get_item
-- One visible item by namespace and key; the id comes first.
SELECT id, namespace, key, value, text, created_at, updated_at, expires_at
FROM memory_items
WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > :now);

-- name: delete_item
-- Delete one item (visible or expired); returns whether it was visible.
DELETE FROM memory_items WHERE namespace = :namespace AND key = :key
RETURNING (expires_at IS NULL OR expires_at > :now);

-- name: search_text
-- Full-text search under a prefix, best first (bm25: lower is better, so negated); the id
-- comes first.
SELECT m.id, m.namespace, m.key, m.value, m.text, m.created_at, m.updated_at, m.expires_at,
       -bm25(memory_fts) AS score
FROM memory_fts JOIN memory_items AS m ON m.id = memory_fts.rowid
WHERE memory_fts MATCH :query
  AND m.namespace >= :lo AND (:hi IS NULL OR m.namespace < :hi)
  AND (m.expires_at IS NULL OR m.expires_at > :now)
  AND (:filter IS NULL OR NOT EXISTS (
      SELECT 1 FROM json_each(:filter) AS f WHERE NOT EXISTS (
          SELECT 1 FROM json_each(m.value) AS v
          WHERE v.key = f.key AND v.value IS f.value
            AND (v.type = f.type
                 OR (v.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))))
ORDER BY score DESC, m.updated_at DESC, m.id DESC
LIMIT :limit;

-- name: search_recent
-- Items under a prefix without a query, most recently written first; the id comes first.
SELECT m.id, m.namespace, m.key, m.value, m.text, m.created_at, m.updated_at, m.expires_at,
       NULL AS score
FROM memory_items AS m
WHERE m.namespace >= :lo AND (:hi IS NULL OR m.namespace < :hi)
  AND (m.expires_at IS NULL OR m.expires_at > :now)
  AND (:filter IS NULL OR NOT EXISTS (
      SELECT 1 FROM json_each(:filter) AS f WHERE NOT EXISTS (
          SELECT 1 FROM json_each(m.value) AS v
          WHERE v.key = f.key AND v.value IS f.value
            AND (v.type = f.type
                 OR (v.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))))
ORDER BY m.updated_at DESC, m.id DESC
LIMIT :limit;

-- name: vector_candidates
-- Ids and embeddings of the visible, embedded items under a prefix (for a cosine scan).
SELECT m.id, m.embedding
FROM memory_items AS m
WHERE m.embedding IS NOT NULL
  AND m.namespace >= :lo AND (:hi IS NULL OR m.namespace < :hi)
  AND (m.expires_at IS NULL OR m.expires_at > :now)
  AND (:filter IS NULL OR NOT EXISTS (
      SELECT 1 FROM json_each(:filter) AS f WHERE NOT EXISTS (
          SELECT 1 FROM json_each(m.value) AS v
          WHERE v.key = f.key AND v.value IS f.value
            AND (v.type = f.type
                 OR (v.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))));

-- name: items_by_id
-- Items by id (a JSON list), in no particular order; the id comes first.
SELECT id, namespace, key, value, text, created_at, updated_at, expires_at
FROM memory_items WHERE id IN (SELECT value FROM json_each(:ids));

-- name: list_namespaces
-- The namespaces holding visible items under a prefix, in order.
SELECT DISTINCT namespace FROM memory_items
WHERE namespace >= :lo AND (:hi IS NULL OR namespace < :hi)
  AND (expires_at IS NULL OR expires_at > :now)
ORDER BY namespace
LIMIT coalesce(:limit, -1);

-- name: delete_namespace
-- Delete every item under a prefix, expired or not (the triggers clear the FTS index).
DELETE FROM memory_items WHERE namespace >= :lo AND (:hi IS NULL OR namespace < :hi);

-- name: purge_index
-- Rewrite the FTS index into one segment, so that deleted text leaves no tokens behind.
INSERT INTO memory_fts (memory_fts) VALUES ('optimize');

-- name: sweep
-- Delete the expired items.
DELETE FROM memory_items WHERE expires_at <= :now;

-- name: texts_to_embed
-- Visible items under a prefix to (re)compute embeddings for: all, or those without one.
SELECT id, text FROM memory_items
WHERE namespace >= :lo AND (:hi IS NULL OR namespace < :hi)
  AND (expires_at IS NULL OR expires_at > :now)
  AND (:all OR embedding IS NULL)
ORDER BY id;

-- name: set_embedding
-- Store one item's embedding, unless its text changed since it was read.
UPDATE memory_items SET embedding = :embedding WHERE id = :id AND text = :text;

-- name: item_name
-- The namespace and key of an item id (for error messages).
SELECT namespace, key FROM memory_items WHERE id = :id;
