"""The rows of the context layer: sessions, messages, compactions, memory items, artifacts.

:class:`ContextData` is the storage role that ``tether.context`` (conversation, memory,
artifacts) depends on; :class:`ContextRows` implements it once for both backends, on
the store's own ``transaction()`` and the named queries of
``sql/<dialect>/{conversation,memory,artifacts}.sql`` (the same names in both dialects).
``SQLiteStore`` and ``PostgresStore`` inherit it.

Each method is one transaction (``BEGIN IMMEDIATE`` on SQLite), takes and returns plain
values or the frozen dataclasses of :mod:`tether.store.context_records`, never driver
rows. Values arrive encoded: JSON text from :mod:`tether.model.codec`, namespaces in
their stored form; decoding them and every decision about them (compaction, ranking,
TTL, validation) stay in ``tether.context``. Driver errors are raised as tether's (see
``Store.transaction``).

Message bodies are stored compressed when that is smaller (:func:`pack`), addressed by
the SHA-256 of their canonical JSON, which compression does not change.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import NotFound, StoreError
from tether.store.artifact_claims import ArtifactClaimRows, ArtifactClaims
from tether.store.context_records import (
    CompactionRecord,
    MemoryRecord,
    MemoryScope,
    MemoryWrite,
    MessageKey,
    MessageRecord,
    NewMessage,
    Ranker,
    SessionRecord,
    VectorHits,
)
from tether.store.queries import load_queries
from tether.store.workspace_rows import WorkspaceBlobRows, WorkspaceBlobs

_NO_LIMIT = 2**62
_OR = {"sqlite": " OR ", "postgres": " or "}  # FTS5 MATCH / websearch_to_tsquery syntax


# -- the role ---------------------------------------------------------------------------


class SessionData(Protocol):
    """Sessions, messages and compactions (tether.context.conversation)."""

    def get_or_create_session(
        self, session_id: str, owner: str | None, now: float
    ) -> SessionRecord:
        """Session ``session_id``, created with ``owner`` unless it exists (then its own)."""
        ...

    def get_session(self, session_id: str) -> SessionRecord | None:
        """Session ``session_id``, or None."""
        ...

    def add_message(self, new: NewMessage) -> MessageRecord | None:
        """Append ``new`` at the session's next seq, its body stored once by hash; return it.

        With ``run_add``, the message the run (``owner``) already added as that add is
        returned instead, nothing written. None, nothing written, when a concurrent add
        with the same ``(run_id, run_add)`` committed first (read it with
        :meth:`message_by_run_add`). Raises NotFound when the session is gone.
        """
        ...

    def message_by_run_add(
        self, session_id: str, run_id: str | None, run_add: int | None
    ) -> MessageRecord | None:
        """The message run ``run_id`` added as its ``run_add``-th add, or None."""
        ...

    def read_messages(self, session_id: str, after: int, upto: int | None) -> list[MessageRecord]:
        """The messages with ``after < seq <= upto`` (None: no bound), in seq order."""
        ...

    def read_prompt_view(
        self, session_id: str, *, base_upto: int, last_seq: int | None
    ) -> tuple[CompactionRecord | None, list[MessageRecord]]:
        """The newest compaction and the messages after what a reader holds, read together:
        after ``last_seq`` when the newest compaction still replaces up to ``base_upto``
        and ``last_seq`` is not None, else every message after the newest compaction."""
        ...

    def list_compactions(self, session_id: str) -> list[CompactionRecord]:
        """Every compaction of the session, oldest first."""
        ...

    def add_compaction(self, session_id: str, new: CompactionRecord) -> bool:
        """Store a summary and the compaction replacing ``1..new.upto``, atomically;
        False, nothing written, when a compaction reaching ``new.upto`` or later exists."""
        ...

    def session_runs(self, session_id: str) -> list[str]:
        """The ids of the runs started in the session, oldest first."""
        ...

    def message_keys(
        self, session_id: str, after: int
    ) -> tuple[list[MessageKey], list[tuple[int, str]]]:
        """The keys of the messages after seq ``after`` (in order) and ``(upto, summary
        SHA-256)`` of every compaction of the session (oldest first), read together."""
        ...

    def put_message_bodies(self, bodies: Mapping[str, str]) -> None:
        """Store JSON bodies by their SHA-256 (the keys), each once."""
        ...

    def get_message_body(self, sha256: str) -> str | None:
        """The JSON body stored under ``sha256``, or None. Raises StoreError for a body in
        an unknown format."""
        ...


class MemoryData(Protocol):
    """Memory items (tether.context.memory)."""

    def put_memory(self, write: MemoryWrite) -> float:
        """Insert or replace one item; return its ``created_at`` (kept on a replace, unless
        the replaced item had expired)."""
        ...

    def get_memory(self, namespace: str, key: str, now: float) -> MemoryRecord | None:
        """The item at ``(namespace, key)`` if unexpired at ``now``."""
        ...

    def delete_memory(self, namespace: str, key: str, now: float) -> bool:
        """Delete one item (expired or not); return whether it was unexpired at ``now``."""
        ...

    def delete_memory_prefix(self, lo: str, hi: str | None) -> int:
        """Delete every item under a prefix, expired or not, and (SQLite) rewrite the
        full-text index so no token of theirs stays; return how many were deleted."""
        ...

    def sweep_memory(self, now: float) -> int:
        """Delete the items expired at ``now``; return how many."""
        ...

    def memory_namespaces(self, scope: MemoryScope, limit: int | None) -> list[str]:
        """The stored namespaces in ``scope`` holding a visible item, in order."""
        ...

    def memory_to_embed(self, scope: MemoryScope, *, all: bool) -> list[tuple[int, str]]:
        """``(id, text)`` of the visible items in ``scope`` lacking an embedding (``all``:
        every one), by id."""
        ...

    def set_memory_embeddings(self, rows: Sequence[tuple[int, str, bytes]]) -> int:
        """Store ``(id, text, embedding)`` for each item whose text is still ``text``;
        return how many were stored."""
        ...

    def search_memory(
        self, scope: MemoryScope, words: Sequence[str] | None, limit: int
    ) -> list[MemoryRecord]:
        """Without ``words``: the items in ``scope`` most recently written first. With
        them: the items matching any word, best full-text rank first (with ``score``)."""
        ...

    def search_memory_vectors(
        self, scope: MemoryScope, rank: Ranker, *, words: Sequence[str] = (), text_limit: int = 0
    ) -> VectorHits:
        """In one transaction: the full-text hits of ``words`` (up to ``text_limit``), then
        ``rank`` over the ``(id, embedding)`` of the embedded items in ``scope``, then the
        items it ranked that the text hits do not hold. An exception of ``rank`` propagates."""
        ...

    def memory_item_name(self, item_id: int) -> tuple[str, str] | None:
        """``(stored namespace, key)`` of an item id, or None."""
        ...


class ArtifactData(Protocol):
    """Artifact bytes in the database (tether.context.artifacts)."""

    def put_artifact(self, sha256: str, data: bytes, now: float) -> None:
        """Store bytes under their SHA-256 unless there (an existing digest is kept)."""
        ...

    def get_artifact(self, sha256: str) -> bytes | None:
        """The bytes stored under ``sha256``, or None (not verified)."""
        ...

    def has_artifact(self, sha256: str) -> bool:
        """Whether bytes are stored under ``sha256``."""
        ...

    def delete_artifact(self, sha256: str) -> bool:
        """Delete the bytes under ``sha256`` and every tenant's claim on them; return
        whether there were any bytes."""
        ...


class ContextData(SessionData, MemoryData, ArtifactData, ArtifactClaims, WorkspaceBlobs, Protocol):
    """What ``tether.context`` needs of a store: its roles. Each method is one
    transaction; driver errors are raised as tether's StoreError (EncodeError for text
    that is not Unicode)."""


@cache
def _queries(dialect: str, file: str) -> dict[str, str]:
    return load_queries(dialect, file)


class _Raced(Exception):
    """Internal: a concurrent add with the same idempotency key won; roll back."""


class ContextRows(ArtifactClaimRows, WorkspaceBlobRows):
    """:class:`ContextData` on a store's ``transaction()`` and ``dialect`` (a mixin of
    both backends)."""

    if TYPE_CHECKING:
        dialect: str

        def transaction(self) -> AbstractContextManager[Any]: ...

    def _rows_sql(self, file: str) -> dict[str, str]:
        """The named queries of ``sql/<dialect>/<file>.sql`` (loaded once per dialect)."""
        return _queries(self.dialect, file)

    # -- sessions and messages -------------------------------------------------------

    def get_or_create_session(
        self, session_id: str, owner: str | None, now: float
    ) -> SessionRecord:
        q = self._rows_sql("conversation")
        with self.transaction() as conn:
            conn.execute(q["create_session"], {"id": session_id, "owner": owner, "now": now})
            row = conn.execute(q["get_session"], {"id": session_id}).fetchone()
        return SessionRecord(row[0], row[1], row[2])

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self.transaction() as conn:
            row = conn.execute(self._rows_sql("conversation")["get_session"], {"id": session_id})
            found = row.fetchone()
        return None if found is None else SessionRecord(found[0], found[1], found[2])

    def add_message(self, new: NewMessage) -> MessageRecord | None:
        q = self._rows_sql("conversation")
        params = {
            "id": new.session_id,
            "role": new.role,
            "sha": new.sha256,
            "size": len(new.body.encode()),
            "body": pack(new.body),
            "meta": new.meta,
            "run_id": new.run_id,
            "run_add": new.run_add,
            "now": new.at,
        }
        try:
            with self.transaction() as conn:
                if new.run_add is not None:
                    by_owner = {"id": new.session_id, "run_id": new.owner, "run_add": new.run_add}
                    found = conn.execute(q["message_by_run_add"], by_owner).fetchone()
                    if found is not None:
                        return _message(found)
                row = conn.execute(q["next_seq"], {"id": new.session_id}).fetchone()
                if row is None:
                    raise NotFound(f"session {new.session_id!r} does not exist any more")
                params["seq"] = seq = int(row[0])
                conn.execute(q["put_body"], params)
                if conn.execute(q["insert_message"], params).rowcount != 1:
                    raise _Raced()
        except _Raced:
            return None
        return MessageRecord(seq, new.role, new.body, new.sha256, new.meta, new.at, new.run_id)

    def message_by_run_add(
        self, session_id: str, run_id: str | None, run_add: int | None
    ) -> MessageRecord | None:
        params = {"id": session_id, "run_id": run_id, "run_add": run_add}
        with self.transaction() as conn:
            found = conn.execute(
                self._rows_sql("conversation")["message_by_run_add"], params
            ).fetchone()
        return None if found is None else _message(found)

    def read_messages(self, session_id: str, after: int, upto: int | None) -> list[MessageRecord]:
        params = {"id": session_id, "after": after, "upto": _NO_LIMIT if upto is None else upto}
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("conversation")["read_messages"], params).fetchall()
        return [_message(r) for r in rows]

    def read_prompt_view(
        self, session_id: str, *, base_upto: int, last_seq: int | None
    ) -> tuple[CompactionRecord | None, list[MessageRecord]]:
        q = self._rows_sql("conversation")
        with self.transaction() as conn:
            row = conn.execute(q["latest_compaction"], {"id": session_id}).fetchone()
            base = _compaction(row) if row is not None else None
            upto = base.upto if base is not None else 0
            after = last_seq if last_seq is not None and upto == base_upto else upto
            params = {"id": session_id, "after": after, "upto": _NO_LIMIT}
            rows = conn.execute(q["read_messages"], params).fetchall()
        return base, [_message(r) for r in rows]

    def list_compactions(self, session_id: str) -> list[CompactionRecord]:
        with self.transaction() as conn:
            rows = conn.execute(
                self._rows_sql("conversation")["list_compactions"], {"id": session_id}
            ).fetchall()
        return [_compaction(r) for r in rows]

    def add_compaction(self, session_id: str, new: CompactionRecord) -> bool:
        q = self._rows_sql("conversation")
        params = {
            "id": session_id,
            "upto": new.upto,
            "sha": new.sha256,
            "size": len(new.body.encode()),
            "body": pack(new.body),
            "before": new.tokens_before,
            "after": new.tokens_after,
            "now": new.at,
        }
        with self.transaction() as conn:
            row = conn.execute(q["latest_compaction"], {"id": session_id}).fetchone()
            if row is not None and int(row[0]) >= new.upto:
                return False
            conn.execute(q["put_body"], params)
            conn.execute(q["insert_compaction"], params)
        return True

    def session_runs(self, session_id: str) -> list[str]:
        with self.transaction() as conn:
            rows = conn.execute(
                self._rows_sql("conversation")["session_runs"], {"id": session_id}
            ).fetchall()
        return [str(r[0]) for r in rows]

    def message_keys(
        self, session_id: str, after: int
    ) -> tuple[list[MessageKey], list[tuple[int, str]]]:
        q = self._rows_sql("conversation")
        with self.transaction() as conn:
            rows = conn.execute(q["message_keys"], {"id": session_id, "after": after}).fetchall()
            summaries = conn.execute(q["list_compactions"], {"id": session_id}).fetchall()
        keys = [MessageKey(int(seq), role, sha, meta) for seq, role, sha, meta in rows]
        return keys, [(int(r[0]), r[2]) for r in summaries]

    def put_message_bodies(self, bodies: Mapping[str, str]) -> None:
        if not bodies:
            return
        put = self._rows_sql("conversation")["put_body"]
        with self.transaction() as conn:
            for sha, body in bodies.items():
                conn.execute(put, {"sha": sha, "size": len(body.encode()), "body": pack(body)})

    def get_message_body(self, sha256: str) -> str | None:
        with self.transaction() as conn:
            row = conn.execute(
                self._rows_sql("conversation")["get_body"], {"sha": sha256}
            ).fetchone()
        return None if row is None else unpack(row[0])

    # -- memory ------------------------------------------------------------------------

    def put_memory(self, write: MemoryWrite) -> float:
        params = {
            "namespace": write.namespace,
            "key": write.key,
            "value": write.value,
            "text": write.text,
            "embedding": write.embedding,
            "now": write.now,
            "expires_at": write.expires_at,
        }
        with self.transaction() as conn:
            return float(
                conn.execute(self._rows_sql("memory")["put_item"], params).fetchall()[0][0]
            )

    def get_memory(self, namespace: str, key: str, now: float) -> MemoryRecord | None:
        params = {"namespace": namespace, "key": key, "now": now}
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("memory")["get_item"], params).fetchall()
        return _item(rows[0]) if rows else None

    def delete_memory(self, namespace: str, key: str, now: float) -> bool:
        params = {"namespace": namespace, "key": key, "now": now}
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("memory")["delete_item"], params).fetchall()
        return bool(rows and rows[0][0])

    def delete_memory_prefix(self, lo: str, hi: str | None) -> int:
        q = self._rows_sql("memory")
        with self.transaction() as conn:
            n = int(conn.execute(q["delete_namespace"], {"lo": lo, "hi": hi}).rowcount)
            if n and "purge_index" in q:  # SQLite FTS5 keeps deleted tokens until merged
                conn.execute(q["purge_index"])
        return n

    def sweep_memory(self, now: float) -> int:
        with self.transaction() as conn:
            return int(conn.execute(self._rows_sql("memory")["sweep"], {"now": now}).rowcount)

    def memory_namespaces(self, scope: MemoryScope, limit: int | None) -> list[str]:
        params = {"lo": scope.lo, "hi": scope.hi, "now": scope.now, "limit": limit}
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("memory")["list_namespaces"], params).fetchall()
        return [r[0] for r in rows]

    def memory_to_embed(self, scope: MemoryScope, *, all: bool) -> list[tuple[int, str]]:
        params = {"lo": scope.lo, "hi": scope.hi, "now": scope.now, "all": all}
        with self.transaction() as conn:
            return [
                (r[0], r[1])
                for r in conn.execute(self._rows_sql("memory")["texts_to_embed"], params)
            ]

    def set_memory_embeddings(self, rows: Sequence[tuple[int, str, bytes]]) -> int:
        set_embedding = self._rows_sql("memory")["set_embedding"]
        with self.transaction() as conn:
            return sum(
                conn.execute(set_embedding, {"id": i, "text": text, "embedding": blob}).rowcount
                for i, text, blob in rows
            )

    def search_memory(
        self, scope: MemoryScope, words: Sequence[str] | None, limit: int
    ) -> list[MemoryRecord]:
        q = self._rows_sql("memory")
        with self.transaction() as conn:
            if words is None:
                rows = conn.execute(q["search_recent"], {**scope.params(), "limit": limit})
            else:
                params = {**scope.params(), "query": self._fts_match(words), "limit": limit}
                rows = conn.execute(q["search_text"], params)
            found = rows.fetchall()
        return [_item(r, r[8]) for r in found]

    def search_memory_vectors(
        self, scope: MemoryScope, rank: Ranker, *, words: Sequence[str] = (), text_limit: int = 0
    ) -> VectorHits:
        q = self._rows_sql("memory")
        base = scope.params()
        with self.transaction() as conn:
            text: list[MemoryRecord] = []
            if words:
                params = {**base, "query": self._fts_match(words), "limit": text_limit}
                text = [_item(r) for r in conn.execute(q["search_text"], params)]
            near = rank(iter(conn.execute(q["vector_candidates"], base)))
            held = {r.id for r in text}
            items = _by_id(conn, q, [i for i, _ in near if i not in held])
        items.update((r.id, r) for r in text)
        return VectorHits(text, near, items)

    def _fts_match(self, words: Sequence[str]) -> str:
        """The words, quoted and OR-ed in the dialect's full-text query syntax."""
        return _OR[self.dialect].join(f'"{w}"' for w in words)

    def memory_item_name(self, item_id: int) -> tuple[str, str] | None:
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("memory")["item_name"], {"id": item_id}).fetchall()
        return (rows[0][0], rows[0][1]) if rows else None

    # -- artifacts ----------------------------------------------------------------------

    def put_artifact(self, sha256: str, data: bytes, now: float) -> None:
        params = {"sha256": sha256, "size": len(data), "data": data, "now": now}
        with self.transaction() as conn:
            conn.execute(self._rows_sql("artifacts")["put_blob"], params)

    def get_artifact(self, sha256: str) -> bytes | None:
        with self.transaction() as conn:
            rows = conn.execute(
                self._rows_sql("artifacts")["get_blob"], {"sha256": sha256}
            ).fetchall()
        return bytes(rows[0][1]) if rows else None

    def has_artifact(self, sha256: str) -> bool:
        with self.transaction() as conn:
            q = self._rows_sql("artifacts")["blob_exists"]
            return bool(conn.execute(q, {"sha256": sha256}).fetchall())

    def delete_artifact(self, sha256: str) -> bool:
        with self.transaction() as conn:
            conn.execute(self._rows_sql("artifacts")["delete_claims"], {"sha256": sha256})
            q = self._rows_sql("artifacts")["delete_blob"]
            return bool(conn.execute(q, {"sha256": sha256}).rowcount)


# -- rows ---------------------------------------------------------------------------------


def _message(row: Sequence[Any]) -> MessageRecord:
    seq, role, body, sha, meta, at, run_id = row
    return MessageRecord(int(seq), role, unpack(body), sha, meta, float(at), run_id)


def _compaction(row: Sequence[Any]) -> CompactionRecord:
    upto, body, sha, before, after, at = row
    return CompactionRecord(int(upto), unpack(body), sha, int(before), int(after), float(at))


def _item(row: Sequence[Any], score: float | None = None) -> MemoryRecord:
    """A row ``(id, namespace, key, value, text, created_at, updated_at, expires_at…)``."""
    item_id, namespace, key, value, text, created_at, updated_at, expires_at = row[:8]
    return MemoryRecord(
        item_id, namespace, key, value, text, created_at, updated_at, expires_at, score
    )


def _by_id(conn: Any, q: Mapping[str, str], ids: Iterable[int]) -> dict[int, MemoryRecord]:
    wanted = list(ids)
    if not wanted:
        return {}
    rows = conn.execute(q["items_by_id"], {"ids": json.dumps(wanted)})
    return {r[0]: _item(r) for r in rows}


# Bodies are stored compressed when that is smaller: one marker byte, then the UTF-8
# JSON (b"j") or its zlib stream (b"z"). Conversation text compresses 2-4x, which keeps
# a session's storage near (or below) its raw size; reads check nothing extra, the
# content address (SHA-256 of the canonical JSON) is unchanged.
_RAW, _ZLIB = b"j", b"z"
_MIN_COMPRESS = 200  # bytes: below this, zlib's header costs more than it saves


def pack(body: str) -> bytes:
    """A message body as stored: raw or zlib-compressed, whichever is smaller."""
    raw = body.encode()
    if len(raw) >= _MIN_COMPRESS:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return _ZLIB + packed
    return _RAW + raw


def unpack(stored: bytes | memoryview | str) -> str:
    """Inverse of :func:`pack` (a str is a body stored before compression existed)."""
    if isinstance(stored, str):
        return stored
    data = bytes(stored)
    if data[:1] == _ZLIB:
        return zlib.decompress(data[1:]).decode()
    if data[:1] == _RAW:
        return data[1:].decode()
    raise StoreError("a stored message body has an unknown format; written by a newer tether?")
