-- Named queries of the memory rows (tether.store.context_rows) on PostgreSQL (tables of
-- 0004_memory.sql), with the same names, parameters and results as sql/sqlite/memory.sql
-- but for purge_index, which only SQLite's FTS5 index needs. Each block: "-- name:
-- <name>", then a one-line purpose, then the statement.
--
-- Shared parameters: %(lo)s and %(hi)s bound a namespace prefix (hi NULL: no upper
-- bound); %(now)s hides expired items; %(filter)s is a JSON object of top-level
-- fields that must be equal (NULL: no filter), compared as jsonb (1 = 1.0; true is
-- not 1). The stored value stays TEXT (an exact round trip); only the compared field
-- is converted.

-- name: put_item
-- Insert or replace one item; an expired row it replaces counts as new (created_at).
INSERT INTO memory_items AS m (namespace, key, value, text, embedding, created_at,
                               updated_at, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, %(text)s, %(embedding)s, %(now)s, %(now)s,
        %(expires_at)s)
ON CONFLICT (namespace, key) DO UPDATE SET
    value = excluded.value,
    text = excluded.text,
    embedding = excluded.embedding,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    created_at = CASE WHEN m.expires_at <= excluded.updated_at
                      THEN excluded.created_at ELSE m.created_at END
RETURNING created_at;

-- name: get_item
-- One visible item by namespace and key; the id comes first.
SELECT id, namespace, key, value, text, created_at, updated_at, expires_at
FROM memory_items
WHERE namespace = %(namespace)s AND key = %(key)s
  AND (expires_at IS NULL OR expires_at > %(now)s);

-- name: delete_item
-- Delete one item (visible or expired); returns whether it was visible.
DELETE FROM memory_items WHERE namespace = %(namespace)s AND key = %(key)s
RETURNING (expires_at IS NULL OR expires_at > %(now)s);

-- name: search_text
-- Full-text search under a prefix, best first (ts_rank: higher is better); the id comes first.
SELECT m.id, m.namespace, m.key, m.value, m.text, m.created_at, m.updated_at, m.expires_at,
       ts_rank(m.tsv, q) AS score
FROM memory_items AS m, websearch_to_tsquery('simple', %(query)s) AS q
WHERE m.tsv @@ q
  AND m.namespace >= %(lo)s AND (%(hi)s::text IS NULL OR m.namespace < %(hi)s)
  AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
  AND (%(filter)s::jsonb IS NULL OR NOT EXISTS (
      SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f
      WHERE (m.value::json -> f.key)::jsonb IS DISTINCT FROM f.value))
ORDER BY score DESC, m.updated_at DESC, m.id DESC
LIMIT %(limit)s;

-- name: search_recent
-- Items under a prefix without a query, most recently written first; the id comes first.
SELECT m.id, m.namespace, m.key, m.value, m.text, m.created_at, m.updated_at, m.expires_at,
       NULL::double precision AS score
FROM memory_items AS m
WHERE m.namespace >= %(lo)s AND (%(hi)s::text IS NULL OR m.namespace < %(hi)s)
  AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
  AND (%(filter)s::jsonb IS NULL OR NOT EXISTS (
      SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f
      WHERE (m.value::json -> f.key)::jsonb IS DISTINCT FROM f.value))
ORDER BY m.updated_at DESC, m.id DESC
LIMIT %(limit)s;

-- name: vector_candidates
-- Ids and embeddings of the visible, embedded items under a prefix (for a cosine scan).
SELECT m.id, m.embedding
FROM memory_items AS m
WHERE m.embedding IS NOT NULL
  AND m.namespace >= %(lo)s AND (%(hi)s::text IS NULL OR m.namespace < %(hi)s)
  AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
  AND (%(filter)s::jsonb IS NULL OR NOT EXISTS (
      SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f
      WHERE (m.value::json -> f.key)::jsonb IS DISTINCT FROM f.value));

-- name: items_by_id
-- Items by id (a JSON list), in no particular order; the id comes first.
SELECT id, namespace, key, value, text, created_at, updated_at, expires_at
FROM memory_items
WHERE id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint);

-- name: list_namespaces
-- The namespaces holding visible items under a prefix, in order.
SELECT DISTINCT namespace FROM memory_items
WHERE namespace >= %(lo)s AND (%(hi)s::text IS NULL OR namespace < %(hi)s)
  AND (expires_at IS NULL OR expires_at > %(now)s)
ORDER BY namespace
LIMIT %(limit)s;

-- name: delete_namespace
-- Delete every item under a prefix, expired or not (the GIN index entries go with the
-- rows; their space is reclaimed by VACUUM).
DELETE FROM memory_items
WHERE namespace >= %(lo)s AND (%(hi)s::text IS NULL OR namespace < %(hi)s);

-- name: sweep
-- Delete the expired items.
DELETE FROM memory_items WHERE expires_at <= %(now)s;

-- name: texts_to_embed
-- Visible items under a prefix to (re)compute embeddings for: all, or those without one.
SELECT id, text FROM memory_items
WHERE namespace >= %(lo)s AND (%(hi)s::text IS NULL OR namespace < %(hi)s)
  AND (expires_at IS NULL OR expires_at > %(now)s)
  AND (%(all)s OR embedding IS NULL)
ORDER BY id;

-- name: set_embedding
-- Store one item's embedding, unless its text changed since it was read.
UPDATE memory_items SET embedding = %(embedding)s WHERE id = %(id)s AND text = %(text)s;

-- name: item_name
-- The namespace and key of an item id (for error messages).
SELECT namespace, key FROM memory_items WHERE id = %(id)s;
