"""The store's roles: small protocols, one per thing tether keeps, and ``Store``, all of them.

Each method is one transaction, takes and returns frozen dataclasses (never raw rows;
:mod:`tether.store.records`), and raises tether's errors only (:mod:`tether.errors`;
backends translate their drivers' at the boundary, :mod:`tether.store.faults`). A
module that needs one role can ask for it alone (``def f(log: RunLog)``); the backends
implement them all (:class:`Store`).

Besides what each docstring names, any method may raise StoreUnavailable (the database
is unreachable or locked; retry), StoreFull (no space: nothing was written), EncodeError
(a value the database cannot store: nothing was written), CorruptRecord (a stored row
cannot be read) or StoreError; never a driver's exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tether.model.events import Event, NewEvent
from tether.store.board_rows import BoardData
from tether.store.context_rows import ContextData
from tether.store.log_rewrite import LogRewrite
from tether.store.records import (
    AuditRecord,
    Effect,
    EffectWrite,
    Gauges,
    Lease,
    Loaded,
    NewRun,
    NewToken,
    QueueLimits,
    RunCount,
    RunFilter,
    RunRecord,
    Serving,
    Signal,
    SignalTake,
    Snapshot,
    TokenRecord,
    Transition,
    UsageTotal,
    WorkerRecord,
)
from tether.store.schedule_rows import ScheduleData


class RunLog(Protocol):
    """Runs and their append-only logs: create, read, append under a lease's fencing token."""

    # Called with (run id, epoch) when a posted append (a worker run's final event) was
    # not committed and will not be retried: the run's lease must be given back, or the
    # heartbeat would extend it while the worker lives (App.let_go). Set by the App.
    unwritten_end: Callable[[str, int], None] | None

    def create_run(
        self,
        run: NewRun,
        events: Sequence[NewEvent],
        *,
        lease_owner: str | None,
        now: float,
        ttl: float,
        transition: Transition | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
    ) -> Lease | None:
        """Insert the run row and its first events (seq 1..n) atomically.

        With ``lease_owner`` the creator also holds the lease (epoch 1) and gets it
        back. ``transition`` and ``writes``, when given, are applied in the same
        transaction after the events, as :meth:`append` applies them (a run created
        with its first execution's writes, even its end: an inline child's). Raises
        Conflict if the id exists, or if a signal to take is taken: nothing is written.
        """
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run's row. Raises NotFound."""
        ...

    def list_runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs newest first, filtered by status and agent."""
        ...

    def page_runs(
        self, filters: RunFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        """At most ``limit`` runs matching ``filters``, newest first (by ``(created_at,
        id)``, descending), after the run ``after`` = ``(created_at, id)`` of the last run
        of the previous page (keyset paging: a page costs the same at any depth, and runs
        created meanwhile never shift a page). One read; an index fits each filter
        (schema 11)."""
        ...

    def run_counts(self, filters: RunFilter) -> list[RunCount]:
        """How many runs ``filters`` select, by agent, version and status (in that order)."""
        ...

    def usage_totals(self, filters: RunFilter, *, by: str) -> list[UsageTotal]:
        """Model usage per agent (``by="agent"``) or per session (``by="session"``) of the
        runs matching ``filters``, costliest first: one read of the runs the filters select
        (an index fits each) and of their model calls' events (by the events' key)."""
        ...

    def inbox_runs(
        self, *, tenant: str | None, limit: int, after: tuple[float, str] | None = None
    ) -> list[RunRecord]:
        """At most ``limit`` runs waiting for a person (``waiting_for`` ``approval:NAME`` or
        ``doubt:KEY``), of ``tenant`` (None: every tenant), oldest request first (by
        ``(updated_at, id)``), after ``after`` = the last run of the previous page."""
        ...

    def load(self, run_id: str, *, upto: int | None = None) -> Loaded:
        """The run row, the newest snapshot at or before ``upto`` and the events after it
        up to ``upto`` (all when None), read in one transaction. Raises NotFound."""
        ...

    def read_events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        """Events with ``after < seq <= upto`` in seq order (empty for an unknown run)."""
        ...

    def append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        epoch: int,
        transition: Transition | None = None,
        snapshot: Snapshot | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
        now: float,
        wait: bool = True,
    ) -> int:
        """Append ``events`` as seq ``expected_seq+1``… and return the new last seq.

        Atomic: all events, the optional status transition, the optional
        snapshot and the effects/signal ``writes``, or nothing (a signal already
        taken raises Conflict). Refused with LeaseLost when ``epoch`` is not the run's
        current fencing token, with Conflict when seq ``expected_seq+1`` is taken,
        with NotFound when the run does not exist.

        ``wait=False`` may return before the commit (a store that batches commits may
        leave it to the next batch; its failure is then only logged). Only for a write
        that may be lost and redone: a worker run's final event, which replaying the
        run's log writes again.
        """
        ...

    def flush(self, *, wait: bool = True) -> None:
        """Commit the appends made with ``wait=False`` that are not committed yet.

        ``wait=False``: only make sure that none of them waits for a later write to be
        committed (a worker calls it before it sleeps, while its other runs still write);
        it may return before the commit. A store whose posted appends are committed
        without a later write (PostgreSQL's group commit flushes them at once, or with
        the batch in flight) returns at once.
        """
        ...

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Cache a folded state at its seq (idempotent: the same seq is the same state)."""
        ...

    def get_effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key, or None."""
        ...

    def set_status(self, run_id: str, transition: Transition, *, now: float) -> None:
        """Change a run's row (status, lease, due time) without an event, in one
        transaction: for repairs and tests. An unknown run is left alone (not an error);
        Conflict when the new status would make two active runs of a queue share a
        dedup key."""
        ...


class Leases(Protocol):
    """Who executes a run: a lease with a fencing token (its epoch)."""

    def claim(
        self, run_id: str, *, owner: str, ttl: float, now: float, takeover: str | None = None
    ) -> Lease:
        """Take the run's lease: free, expired, already ours, or held by ``takeover``.

        Bumps the fencing token. Raises Conflict (naming the holder) otherwise,
        NotFound for an unknown run.
        """
        ...

    def release(self, run_id: str, *, epoch: int) -> None:
        """Give the lease back if ``epoch`` is still current (else do nothing)."""
        ...

    def renew(self, owner: str, *, ttl: float, now: float) -> int:
        """Heartbeat: extend every lease held by ``owner``; return how many."""
        ...


class Queue(Protocol):
    """Queued runs and the claims of workers, within each queue's limits."""

    # Whether a worker's threads should claim at the same time: True where a claim can
    # share a commit with the other writes in flight (PostgreSQL's group commit), False
    # where each claim is a write transaction of its own that would only queue behind the
    # others (SQLite), so that one claim at a time takes every slot that came free.
    concurrent_claims: bool

    def enqueue(
        self, run: NewRun, events: Sequence[NewEvent], *, now: float, max_depth: int | None
    ) -> tuple[str, bool]:
        """Create a queued run unless its id or its (queue, dedup_key) is already taken, and
        tell waiting workers in the same transaction (PostgreSQL: NOTIFY; SQLite: they poll).

        Returns ``(run_id, created)``: the existing run's id when not created. Raises
        QueueFull when the queue already holds ``max_depth`` queued runs.
        """
        ...

    def enqueue_many(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEvent]]], *, now: float
    ) -> list[bool]:
        """Create the queued runs whose ids are not taken, all in one transaction, and tell
        waiting workers in it; a run whose id exists is left as it is. Returns, for each
        run in order, whether it was created. For runs without a dedup key, in queues
        without a ``max_depth`` (a batch of child runs: tether.engine.children)."""
        ...

    def claim_next(
        self,
        queues: Sequence[QueueLimits],
        *,
        owner: str,
        ttl: float,
        now: float,
        capacity: int,
        serving: Serving | None = None,
    ) -> list[tuple[RunRecord, Lease]]:
        """Claim up to ``capacity`` runs from ``queues`` (in the order given), best first:
        queued and due, waiting and due (timer, timeout) or running under an expired lease;
        with ``serving``, only runs of the agents' versions it serves (see Serving).

        Each claim bumps the fencing token. Never exceeds a queue's limits, whatever
        other workers claim concurrently. Returns the rows as the claim left them
        (``running``, the new epoch) with the new leases.
        """
        ...

    def notify_work(self, queue: str) -> None:
        """Tell waiting workers that ``queue`` has work (PostgreSQL NOTIFY; SQLite: no-op)."""
        ...

    def wait_for_work(self, queues: Sequence[str], timeout: float, wake: threading.Event) -> None:
        """Block until work may be available in ``queues``, ``wake`` is set, or ``timeout``
        seconds pass (PostgreSQL: LISTEN; SQLite: a short poll)."""
        ...

    def workers_sharing(self, workers: int) -> None:
        """A hint from a worker of this process: ``workers`` live workers share the
        database (a store may size its batching to it; SQLite: no-op)."""
        ...


class Inbox(Protocol):
    """What is sent to a run from outside: signals, wake-ups and cancel requests."""

    def send_signal(
        self, run_id: str, name: str, payload: str, *, sender: str | None, now: float
    ) -> bool:
        """Keep a signal for the run; if the run waits for it (``signal:NAME``), make it
        queued. Returns whether it woke the run. Raises NotFound."""
        ...

    def pending_signal(self, run_id: str, name: str) -> Signal | None:
        """The oldest signal ``name`` sent to the run and not taken yet."""
        ...

    def wake(self, run_id: str, waiting_for: str, *, now: float) -> bool:
        """Make the run queued if it is waiting for exactly ``waiting_for``."""
        ...

    def request_cancel(self, run_id: str, *, compensate: bool, now: float) -> None:
        """Flag the run so that the process executing it stops at its next step."""
        ...


class Workers(Protocol):
    """The registered workers, their heartbeats and the requests they heed."""

    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        """Add (or refresh) a worker row."""
        ...

    def worker_heartbeat(
        self, worker_id: str, *, ttl: float, now: float
    ) -> tuple[bool, dict[str, int]]:
        """Extend the worker's leases and mark it alive, in one transaction. Returns
        whether it was asked to stop, and its runs asked to cancel (run id -> 1 or 2)."""
        ...

    def cancel_requests(self, owner: str) -> dict[str, int]:
        """The runs leased by ``owner`` that were asked to cancel (run id -> 1, or 2 to
        compensate first); a read, between heartbeats."""
        ...

    def list_workers(self) -> list[WorkerRecord]:
        """Registered workers, newest heartbeat first."""
        ...

    def gauges(self, now: float) -> Gauges:
        """The unfinished runs by status and agent, the queues' depths and oldest claimable
        run (available by ``now``), and the runs in doubt: one read, each part a range of an
        index (the finished runs, however many, are never counted)."""
        ...

    def remove_worker(self, worker_id: str, *, expire_leases: bool) -> None:
        """Forget a worker; with ``expire_leases`` its runs become claimable at once."""
        ...


class Audit(Protocol):
    """The audit log beside the runs' logs (it outlives the runs)."""

    def record_audit(
        self, run_id: str | None, action: str, detail: str, *, actor: str | None, now: float
    ) -> None:
        """Append a record to the audit log (independent of any run's lease)."""
        ...

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        """A run's audit records, oldest first."""
        ...


class Credentials(Protocol):
    """API tokens (tether.services.identity): stored as a hash of the plaintext, never
    the plaintext. The store does not check names, roles or tenants: the service does."""

    def create_token(self, token: NewToken, *, now: float) -> TokenRecord:
        """Store a new token row and return it. Raises Conflict when a token (revoked or
        not) already has its name, or its id or hash (nothing is written)."""
        ...

    def get_token(self, token_id: str) -> TokenRecord | None:
        """The token whose public id is ``token_id`` (revoked or not), or None."""
        ...

    def list_tokens(self) -> list[TokenRecord]:
        """Every token row, revoked ones included, oldest first."""
        ...

    def revoke_token(self, name: str, *, now: float) -> bool:
        """Revoke the token named ``name``: True when this call revoked it, False when it
        was revoked already (its first revocation time is kept). Raises NotFound for a
        name no token has."""
        ...

    def touch_token(self, token_id: str, *, now: float) -> None:
        """Set the token's ``last_used_at`` to ``now`` (an unknown id: nothing)."""
        ...


class Blobs(Protocol):
    """Content-addressed pages of snapshots (tether.store.snapshots)."""

    def put_blobs(
        self, blobs: Mapping[str, bytes], *, now: float, touch: Sequence[str] = ()
    ) -> None:
        """Store each ``sha256 -> bytes`` of ``blobs`` in the blobs table as a snapshot
        page unless that digest is stored already (its bytes are then left as they are).
        Every page written, and each stored page of ``touch``, is dated ``now``, so that
        :meth:`sweep_blobs` leaves it for its grace period (a snapshot about to reference
        it is not committed yet). Atomic: all or nothing. The caller computes the
        digests; they are not checked here."""
        ...

    def get_blobs(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of these digests; absent digests are left out (not an
        error). Not verified against the digests: that is the caller's choice."""
        ...

    def sweep_blobs(self, *, before: float, dry_run: bool = False) -> tuple[int, int]:
        """Delete the snapshot pages that no snapshot references and that were written
        or touched before ``before``; ``(pages, bytes)`` deleted (``dry_run``: that would
        be). Artifacts, bytes a tenant claims (even stored as a page) and blobs of
        unknown kind are never deleted."""
        ...


class Maintenance(Protocol):
    """The database itself: where it is, its schema, clock, retention and connections."""

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``: the ``sql/<dialect>/`` folder of named queries."""
        ...

    @property
    def where(self) -> str:
        """Where the data lives, for messages: a file path, or ``user@host:port/db
        (schema s)`` (never a password)."""
        ...

    @property
    def path(self) -> str | None:
        """The database file of a file store (SQLite), None for a server."""
        ...

    def schema_version(self) -> int:
        """The schema version of the open database (the number of its last migration).
        Raises CorruptRecord when tether_meta's value is not a number."""
        ...

    def clock_offset(self, now: Callable[[], float]) -> float:
        """Seconds the database's clock is ahead of ``now`` (this process's clock, in seconds
        since the epoch; negative: behind).
        Leases are due times from one process's clock checked against another's, so
        processes on several machines need their clocks to agree (0.0 where they share
        one: SQLite)."""
        ...

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete these runs with their events, snapshots, effects and signals; return how
        many runs were deleted.

        One transaction: all of it or nothing. Unknown ids are skipped (not an error), so
        a repeated call deletes nothing more. It does not look at leases or forks: the
        caller chooses (forks copy their prefix, so they never depend on a parent). Audit
        records are kept (the audit trail outlives the runs it describes), and so are a
        session's messages (their run_id only says which run added them).
        """
        ...

    def vacuum(self) -> None:
        """Give the space of deleted rows back to the file system, where the backend can.

        Not in a transaction; may take a while on a large database and wait for other
        writers. Raises StoreError when the database stays busy.
        """
        ...

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A context manager yielding the raw DB-API connection inside one transaction.

        For store code that keeps its own tables and named queries in
        ``sql/<dialect>/<module>.sql`` (store/context_rows.py: the rows of sessions,
        memory and artifacts; nothing above the store layer opens one). Everything
        executed in the block commits together when it exits normally, and rolls back
        when it raises (the exception propagates). Driver errors, in the block or at
        commit, are raised as StoreError. Placeholders are the driver's (``:name`` for
        sqlite3, ``%(name)s`` for psycopg). The connection must not be used after the
        block, and no other store method may be called inside it (SQLite: one
        connection per thread, already in a write transaction; PostgreSQL: a second
        pooled connection could wait on this one's locks).
        """
        ...


class Store(
    RunLog,
    Leases,
    Queue,
    Inbox,
    Workers,
    Audit,
    Credentials,
    Blobs,
    Maintenance,
    ContextData,
    LogRewrite,
    BoardData,
    ScheduleData,
    Protocol,
):
    """What tether needs from a database: every role. Every method is one transaction."""
