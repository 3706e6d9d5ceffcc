"""The SQL plumbing both backends share: the cold-path Store methods, written once.

:class:`SqlStore` implements each method that is one or two named queries the same way
in both dialects (leases given back, signals read, audit records, workers, blobs, the
schema version…) over a few hooks that a backend overrides, and nothing else:

- ``_Q``: the dialect's named queries (``sql/<dialect>/queries.sql``), the same name for
  the same operation in both dialects (tests/unit/test_query_names.py checks it);
- ``_for_read()``: a connection to read on (SQLite: this thread's, outside any write
  transaction; PostgreSQL: a pooled autocommit connection);
- ``_for_write()``: a connection whose statements commit when the block exits normally
  and roll back when it raises (SQLite: ``BEGIN IMMEDIATE`` under the writer lock;
  PostgreSQL: a pooled autocommit connection, so the methods here that write run one
  statement each);
- ``_transaction()``: a connection inside one transaction, for several statements that
  must commit together (PostgreSQL: ``BEGIN``);
- ``_run_row(conn, run_id)`` and ``_run_rows(conn, name, params)``: run rows as records;
- ``_range``, ``_limit``, ``_id_list``: the parameters a dialect's driver takes;
- ``_unique_violation``: the driver's error of a unique constraint;
- ``_fault(error, where)``: the tether error of what escaped a method (``faults``).

The hot path (append, load, claim_next, the group commits) stays in each backend: it is
where the dialects differ, and where every round trip counts. Both drivers take the
same parameters for the same query (a tuple for ``?``/``%s``, a dict for named ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from typing import Any, ClassVar

from tether.errors import Conflict, LeaseLost, NotFound, StoreError, TetherError
from tether.model.events import Event
from tether.store.faults import schema_number, translating
from tether.store.records import (
    TOUCH_AFTER,
    AuditRecord,
    Effect,
    Gauges,
    Lease,
    NewToken,
    RunCount,
    RunFilter,
    RunRecord,
    Serving,
    Signal,
    Snapshot,
    TokenRecord,
    Transition,
    UsageTotal,
    WorkerRecord,
)

PAST_TEXT = "\U0010ffff"  # text + this: past every text that starts with it (byte order)


def check_reused_pages(touch: Sequence[str], found: int) -> None:
    """The pages a snapshot reuses must all be stored (gc may have swept one)."""
    if found < len(set(touch)):
        raise StoreError(
            f"{len(set(touch)) - found} snapshot page(s) this snapshot reuses are gone (gc "
            f"swept them); the snapshot is not saved, and the next load folds the run's events"
        )


def gap_conflict(run_id: str, seq: int) -> Conflict:
    """An append of ``seq`` under the current lease to a log that does not reach ``seq - 1``."""
    return Conflict(
        f"run {run_id}: cannot append seq {seq}: the log does not end at seq "
        f"{seq - 1} (a log has no gaps); reload the run and try again"
    )


def worker_record(row: Sequence[Any]) -> WorkerRecord:
    """A ``list_workers`` row (its queues and what it serves as JSON text) as a record."""
    id_, host, pid, queues, concurrency, started, beat, stopping, serves = row
    record = (id_, host, pid, json.loads(queues), concurrency, started, beat, stopping)
    return WorkerRecord(*record, serves=Serving.loads(serves))


class SqlStore:
    """The cold-path methods of :class:`tether.store.Store` over a backend's hooks (see
    the module's docstring). Not a store by itself: a backend subclasses it."""

    dialect: ClassVar[str]
    _Q: Mapping[str, str]  # a class attribute, or per store (PostgreSQL: in its schema)
    _unique_violation: ClassVar[type[Exception]]
    where: str  # for messages: a file path, or user@host:port/db (schema s)
    path: str | None = None  # the database file (None: a server)
    unwritten_end: Callable[[str, int], None] | None = None  # see tether.store.RunLog

    # -- hooks ------------------------------------------------------------

    def _for_read(self) -> AbstractContextManager[Any]:
        """A connection to read on (see the module's docstring)."""
        raise NotImplementedError

    def _for_write(self) -> AbstractContextManager[Any]:
        """A connection whose writes commit when the block exits normally."""
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        """A connection inside one transaction (several statements, all or nothing)."""
        raise NotImplementedError

    def _fault(self, e: Exception, where: str) -> TetherError | None:
        """The tether error of an exception that escaped a method (see faults.translated)."""
        raise NotImplementedError

    def _run_row(self, conn: Any, run_id: str) -> RunRecord | None:
        """The run's row as a record, or None (on ``conn``)."""
        raise NotImplementedError

    def _run_rows(
        self, conn: Any, name: str, params: Mapping[str, Any], *, sql: str | None = None
    ) -> list[RunRecord]:
        """The run rows that query ``name`` (or the statement ``sql``, composed of named
        queries) returns, as records."""
        raise NotImplementedError

    def _range(self, run_id: str, after: int, upto: int | None) -> Any:
        """read_events' parameters: seq in (after, upto], every one when upto is None."""
        raise NotImplementedError

    def _limit(self, limit: int) -> int | None:
        """list_runs' LIMIT: a negative ``limit`` means none."""
        return limit

    def _id_list(self, ids: Sequence[str]) -> Any:
        """A list of ids as one parameter."""
        raise NotImplementedError

    def _not_found(self, run_id: str) -> NotFound:
        return NotFound(f"no run {run_id!r} in {self.where}; `tether runs` lists the runs")

    # -- runs -------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        with self._for_read() as conn:
            record = self._run_row(conn, run_id)
        if record is None:
            raise self._not_found(run_id)
        return record

    def list_runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        params = {"status": status, "agent": agent, "limit": self._limit(limit)}
        with self._for_read() as conn:
            return self._run_rows(conn, "list_runs", params)

    def page_runs(
        self, filters: RunFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        parts, params = self._filters(filters)
        params["limit"] = limit
        if after is not None:
            parts.append(self._Q["page_runs_cursor"])
            params.update(cursor_at=after[0], cursor_id=after[1])
        return self._composed("page_runs", parts, params)

    def _filters(self, filters: RunFilter) -> tuple[list[str], dict[str, Any]]:
        """The page_runs_* conditions of ``filters`` and their parameters."""
        params: dict[str, Any] = {}
        parts = []
        for name in ("status", "agent", "queue", "session", "tenant", "version"):
            value = getattr(filters, name)
            if value is not None:
                parts.append(self._Q[f"page_runs_{name}"])
                params[name] = value
        if filters.text is not None:
            parts.append(self._Q["page_runs_text"])
            params.update(lo=filters.text, hi=filters.text + PAST_TEXT)
        for bound, name in (("created_after", "after"), ("created_before", "before")):
            if getattr(filters, bound) is not None:
                parts.append(self._Q[f"page_runs_{name}"])
                params[bound] = getattr(filters, bound)
        return parts, params

    def run_counts(self, filters: RunFilter) -> list[RunCount]:
        parts, params = self._filters(filters)
        sql = self._Q["run_counts"].replace("/*filters*/", " ".join(parts))
        with self._for_read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [RunCount(r[0], r[1], r[2], int(r[3])) for r in rows]

    def usage_totals(self, filters: RunFilter, *, by: str) -> list[UsageTotal]:
        parts, params = self._filters(filters)
        sql = self._Q["usage_totals"].replace("/*filters*/", " ".join(parts))
        with self._for_read() as conn:
            rows = conn.execute(sql, {**params, "by": by}).fetchall()
        return [
            UsageTotal(r[0], int(r[1]), int(r[2]), float(r[3]), int(r[4]), int(r[5])) for r in rows
        ]

    def inbox_runs(
        self, *, tenant: str | None, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        params: dict[str, Any] = {"limit": limit}
        parts = []
        if tenant is not None:
            parts.append(self._Q["page_runs_tenant"])
            params["tenant"] = tenant
        if after is not None:
            parts.append(self._Q["inbox_runs_cursor"])
            params.update(cursor_at=after[0], cursor_id=after[1])
        # SQLite names the index of a tenant's inbox in a query of its own (PostgreSQL
        # chooses it from the filter)
        owner = tenant is not None and "inbox_runs_owner" in self._Q
        return self._composed("inbox_runs_owner" if owner else "inbox_runs", parts, params)

    def _composed(self, name: str, parts: list[str], params: dict[str, Any]) -> list[RunRecord]:
        """Query ``name`` with its ``/*filters*/`` mark replaced by ``parts`` (named
        conditions, never a caller's text: the caller's values are parameters)."""
        sql = self._Q[name].replace("/*filters*/", " ".join(parts))
        with self._for_read() as conn:
            return self._run_rows(conn, name, params, sql=sql)

    def read_events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        with self._for_read() as conn:
            rows = conn.execute(self._Q["read_events"], self._range(run_id, after, upto))
            return [Event(*r) for r in rows.fetchall()]

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Cache a folded state (a snapshot at a seq is always the same state)."""
        params = (snapshot.run_id, snapshot.seq, snapshot.data, snapshot.at)
        with self._for_write() as conn:
            conn.execute(self._Q["insert_snapshot"], params)

    def get_effect(self, key: str) -> Effect | None:
        with self._for_read() as conn:
            row = conn.execute(self._Q["get_effect"], (key,)).fetchone()
        return Effect(*row) if row else None

    def set_status(self, run_id: str, transition: Transition, *, now: float) -> None:
        """Change a run's row status without an event (used by repairs and tests)."""
        with self._for_write() as conn:
            self._transition(conn, run_id, transition, now)

    def _transition(self, conn: Any, run_id: str, t: Transition, now: float) -> None:
        try:
            self._update_status(conn, run_id, t, now)
        except self._unique_violation:
            raise Conflict(
                f"run {run_id} cannot become {t.status}: another active run of its queue holds "
                f"the same dedup key; wait for that run to finish"
            ) from None

    def _update_status(self, conn: Any, run_id: str, t: Transition, now: float) -> None:
        conn.execute(
            self._Q["update_status"],
            {
                "id": run_id,
                "status": t.status,
                "now": now,
                "release": t.release,
                "available_at": t.available_at,
                "waiting_for": t.waiting_for,
            },
        )

    def _refused(self, conn: Any, run_id: str, epoch: int, seq: int | None = None) -> Exception:
        """Why an append was refused (its fencing matched no row): NotFound, a gap in the
        log (``seq`` given: the epoch is current), or LeaseLost."""
        record = self._run_row(conn, run_id)
        if record is None:
            return self._not_found(run_id)
        if record.epoch == epoch and seq is not None:
            return gap_conflict(run_id, seq)
        return LeaseLost(
            f"run {run_id}: this writer's lease (epoch {epoch}) was superseded by "
            f"{record.lease_owner or 'another claim'} (epoch {record.epoch}); it must stop. "
            f"Nothing was appended."
        )

    # -- blobs ------------------------------------------------------------

    def put_blobs(
        self, blobs: Mapping[str, bytes], *, now: float, touch: Sequence[str] = ()
    ) -> None:
        """Store the pages whose digest is not stored yet, and date the others given,
        in one transaction (see Store.put_blobs)."""
        rows = [(digest, len(data), data, now) for digest, data in blobs.items()]
        touched = [(now, d, now - TOUCH_AFTER) for d in touch]
        with self._transaction() as conn, closing(conn.cursor()) as cur:
            if rows:
                cur.executemany(self._Q["put_blob"], rows)
            if touched:
                cur.executemany(self._Q["touch_blob"], touched)
                params = {"digests": self._id_list(touch)}
                found = cur.execute(self._Q["count_blobs"], params).fetchone()[0]
                check_reused_pages(touch, int(found))

    def sweep_blobs(self, *, before: float, dry_run: bool = False) -> tuple[int, int]:
        """Delete the unreferenced snapshot pages dated before ``before`` (see Store)."""
        with self._for_write() as conn:
            if not conn.execute(self._Q["any_old_page"], {"before": before}).fetchone()[0]:
                return 0, 0  # reading every snapshot to find none: skipped
            if dry_run:
                row = conn.execute(self._Q["count_sweepable_blobs"], {"before": before})
                count, size = row.fetchone()
                return int(count), int(size)
            sizes = [r[0] for r in conn.execute(self._Q["sweep_blobs"], {"before": before})]
        return len(sizes), sum(sizes)

    def get_blobs(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of these digests (absent ones left out)."""
        out: dict[str, bytes] = {}
        with self._for_read() as conn:
            for digest in digests:
                row = conn.execute(self._Q["get_blob"], (digest,)).fetchone()
                if row is not None:
                    out[digest] = bytes(row[0])
        return out

    # -- leases -----------------------------------------------------------

    def claim(
        self, run_id: str, *, owner: str, ttl: float, now: float, takeover: str | None = None
    ) -> Lease:
        params = {
            "id": run_id,
            "owner": owner,
            "expires": now + ttl,
            "now": now,
            "takeover": takeover,
        }
        with self._for_write() as conn:
            row = conn.execute(self._Q["claim"], params).fetchone()
            current = self._run_row(conn, run_id) if row is None else None
        if row is not None:
            return Lease(run_id, owner, int(row[0]), now + ttl)
        if current is None:
            raise self._not_found(run_id)
        expires = current.lease_expires
        raise Conflict(
            f"run {run_id} is being executed by {current.lease_owner or 'another worker'} "
            f"(lease until {expires if expires is None else format(expires, '.3f')}); wait for "
            f"it to finish or for its lease to expire"
        )

    def release(self, run_id: str, *, epoch: int) -> None:
        with self._for_write() as conn:
            conn.execute(self._Q["release"], (run_id, epoch))

    def renew(self, owner: str, *, ttl: float, now: float) -> int:
        with self._for_write() as conn:
            return int(conn.execute(self._Q["renew"], (now + ttl, owner)).rowcount)

    # -- signals, cancel requests, audit ------------------------------------

    def pending_signal(self, run_id: str, name: str) -> Signal | None:
        with self._for_read() as conn:
            row = conn.execute(self._Q["pending_signal"], (run_id, name)).fetchone()
        return Signal(*row) if row else None

    def wake(self, run_id: str, waiting_for: str, *, now: float) -> bool:
        params = {"id": run_id, "waiting_for": waiting_for, "now": now}
        with self._for_write() as conn:
            return bool(conn.execute(self._Q["wake_for"], params).rowcount == 1)

    def request_cancel(self, run_id: str, *, compensate: bool, now: float) -> None:
        flag = 2 if compensate else 1
        with self._for_write() as conn:
            found = conn.execute(self._Q["request_cancel"], (flag, now, run_id)).rowcount
        if not found:
            raise self._not_found(run_id)

    def record_audit(
        self, run_id: str | None, action: str, detail: str, *, actor: str | None, now: float
    ) -> None:
        with self._for_write() as conn:
            conn.execute(self._Q["insert_audit"], (run_id, now, actor, action, detail))

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        with self._for_read() as conn:
            rows = conn.execute(self._Q["read_audit"], (run_id,)).fetchall()
        return [AuditRecord(*r) for r in rows]

    # -- API tokens ---------------------------------------------------------

    def create_token(self, token: NewToken, *, now: float) -> TokenRecord:
        params = {
            "id": token.id,
            "name": token.name,
            "role": token.role,
            "tenant": token.tenant,
            "hash": token.hash,
            "now": now,
        }
        with self._for_write() as conn:
            try:
                conn.execute(self._Q["insert_token"], params)
            except self._unique_violation:  # nothing written: the write is rolled back
                raise Conflict(
                    f"a token named {token.name!r} exists already in {self.where} (revoked "
                    f"tokens keep their names); choose another name (`tether token list`)"
                ) from None
        return TokenRecord(token.id, token.name, token.role, token.tenant, token.hash, now)

    def get_token(self, token_id: str) -> TokenRecord | None:
        with self._for_read() as conn:
            row = conn.execute(self._Q["get_token"], {"id": token_id}).fetchone()
        return TokenRecord(*row) if row is not None else None

    def list_tokens(self) -> list[TokenRecord]:
        with self._for_read() as conn:
            rows = conn.execute(self._Q["list_tokens"]).fetchall()
        return [TokenRecord(*r) for r in rows]

    def revoke_token(self, name: str, *, now: float) -> bool:
        with self._for_write() as conn:
            if conn.execute(self._Q["revoke_token"], {"name": name, "now": now}).rowcount:
                return True
            known = conn.execute(self._Q["token_named"], {"name": name}).fetchone()
        if known is None:
            raise NotFound(f"no token named {name!r} in {self.where}; `tether token list`")
        return False

    def touch_token(self, token_id: str, *, now: float) -> None:
        with self._for_write() as conn:
            conn.execute(self._Q["touch_token"], {"id": token_id, "now": now})

    # -- workers ----------------------------------------------------------

    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        params = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": json.dumps(worker.queues),
            "concurrency": worker.concurrency,
            "now": now,
            "serves": None if worker.serves is None else worker.serves.dumps(),
        }
        with self._for_write() as conn:
            conn.execute(self._Q["upsert_worker"], params)

    def cancel_requests(self, owner: str) -> dict[str, int]:
        with self._for_read() as conn:
            rows = conn.execute(self._Q["cancel_requests"], (owner,)).fetchall()
        return {run_id: int(flag) for run_id, flag in rows}

    def list_workers(self) -> list[WorkerRecord]:
        with self._for_read() as conn:
            rows = conn.execute(self._Q["list_workers"]).fetchall()
        return [worker_record(r) for r in rows]

    def gauges(self, now: float) -> Gauges:
        with self._for_read() as conn:
            active = conn.execute(self._Q["gauge_active_runs"]).fetchall()
            queues = conn.execute(self._Q["gauge_queues"], {"now": now}).fetchall()
            doubt = conn.execute(self._Q["gauge_in_doubt"]).fetchone()
        return Gauges(
            active=[(s, a, int(n)) for s, a, n in active],
            queues=[(q, int(n), None if t is None else float(t)) for q, n, t in queues],
            in_doubt=int(doubt[0]) if doubt else 0,
        )

    # -- the database -----------------------------------------------------

    def schema_version(self) -> int:
        """The schema version of the open database."""
        with self._for_read() as conn:
            row = conn.execute(self._Q["schema_version"]).fetchone()
        return schema_number(row[0] if row else None, self.where)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """The raw DB-API connection inside one transaction (see Store.transaction):
        SQLite's ``BEGIN IMMEDIATE`` on this thread's writer, or a pooled PostgreSQL
        connection in ``BEGIN``; driver errors raised as tether's."""
        with translating(self._fault, "transaction"), self._transaction() as conn:
            yield conn
