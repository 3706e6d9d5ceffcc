"""The Store protocol: everything tether keeps, behind a small set of methods.

Each method is one transaction, takes and returns frozen dataclasses (never
raw rows), and translates database errors into :mod:`tether.errors`. The
runtime, worker, CLI and server see only this protocol; ``tether.open(url)``
picks the backend (:mod:`tether.store.sqlite` for a path or ``sqlite:///…``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.errors import Conflict, StoreError
from tether.model.events import Event, NewEvent
from tether.store.context_rows import ContextData

TOUCH_AFTER = 60.0  # seconds: a snapshot page dated this recently is not dated again


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run's row: identity, status and lease. Its state is in its events."""

    id: str
    agent: str
    version: str | None
    status: str
    code: dict[str, Any]
    created_at: float
    updated_at: float
    epoch: int = 0
    lease_owner: str | None = None
    lease_expires: float | None = None
    parent_id: str | None = None
    fork_seq: int | None = None
    session_id: str | None = None
    owner: str | None = None
    queue: str | None = None
    priority: int = 0
    available_at: float | None = None
    waiting_for: str | None = None  # approval:NAME | signal:NAME | timer | doubt:KEY
    cancel_requested: int = 0  # 1: stop at the next step; 2: and compensate
    dedup_key: str | None = None
    concurrency_key: str | None = None
    claimed_at: float | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run about to be created."""

    id: str
    agent: str
    version: str | None
    status: str
    code: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None
    fork_seq: int | None = None
    session_id: str | None = None
    owner: str | None = None
    queue: str | None = None
    priority: int = 0
    available_at: float | None = None
    dedup_key: str | None = None  # one active run per (queue, dedup_key)
    concurrency_key: str | None = None  # limits per key (e.g. a tenant)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Flow control of one queue, enforced by every claim (across all workers)."""

    name: str
    concurrency: int | None = None  # runs executing at once, all workers together
    per_key: int | None = None  # runs executing at once per concurrency_key
    rate: tuple[int, float] | None = None  # at most N claims per period (seconds)
    room: int | None = None  # at most this many from this queue in one claim (one worker's)

    @property
    def limited(self) -> bool:
        """Whether the queue has limits across workers (claims must count running runs)."""
        return self.concurrency is not None or self.per_key is not None or self.rate is not None

    def most(self, capacity: int) -> int:
        """How many runs one claim may take from this queue, with ``capacity`` left."""
        return capacity if self.room is None else min(capacity, self.room)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A registered worker; its id is the lease owner of the runs it executes."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: float
    heartbeat_at: float
    stopping: int = 0


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on a run: ``epoch`` is the fencing token every append must carry."""

    run_id: str
    owner: str
    epoch: int
    expires: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A cached fold of a run's log up to and including ``seq``."""

    run_id: str
    seq: int
    data: (
        str  # JSON (tether.model.codec): a format 2 root (tether.store.snapshots) or to_data(state)
    )
    at: float


@dataclass(frozen=True, slots=True)
class Transition:
    """A run-row change made in the same transaction as an append."""

    status: str
    release: bool = False  # give the lease back (the run stops executing)
    available_at: float | None = None  # a waiting run's due time (timer, timeout)
    waiting_for: str | None = None  # what a waiting run waits for (see RunRecord)


@dataclass(frozen=True, slots=True)
class Effect:
    """A row of the effects table: the outcome of one idempotency key."""

    key: str
    run_id: str
    position: int
    tool: str
    status: str  # intent | completed | compensating | compensated (tether.engine.effects.UNDONE)
    result: str | None  # JSON (tether.model.codec) when completed
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class EffectWrite:
    """An effects-table write made in the same transaction as an append."""

    key: str
    run_id: str
    position: int
    tool: str
    status: str
    result: str | None = None


@dataclass(frozen=True, slots=True)
class SignalTake:
    """Mark signal ``signal_id`` taken by the appended event at ``seq``, atomically."""

    signal_id: int
    seq: int


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal sent to a run, kept until a wait takes it."""

    id: int
    run_id: str
    name: str
    payload: str  # JSON (tether.model.codec)
    sent_at: float
    sender: str | None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An operation refused or worth keeping beside a run's log."""

    id: int
    run_id: str | None
    at: float
    actor: str | None
    action: str
    detail: str  # JSON


@dataclass(frozen=True, slots=True)
class Loaded:
    """A consistent read of one run: its row, newest snapshot and the events after it."""

    run: RunRecord
    snapshot: Snapshot | None
    events: list[Event]


def pick_within_limits(
    candidates: Sequence[tuple[str, str | None]],
    running: dict[str | None, int],
    limits: QueueLimits,
    budget: int,
) -> list[str]:
    """Pure: which candidates (id, concurrency key), best first, a claim may take without
    exceeding ``budget`` or the queue's per-key limit given what is ``running``."""
    taken: list[str] = []
    per_key = dict(running)
    for run_id, key in candidates:
        if len(taken) >= budget:
            break
        if limits.per_key is not None and key is not None:
            if per_key.get(key, 0) >= limits.per_key:
                continue
            per_key[key] = per_key.get(key, 0) + 1
        taken.append(run_id)
    return taken


class Store(ContextData, Protocol):
    """What tether needs from a database. Every method is one transaction."""

    def create_run(
        self,
        run: NewRun,
        events: Sequence[NewEvent],
        *,
        lease_owner: str | None,
        now: float,
        ttl: float,
    ) -> Lease | None:
        """Insert the run row and its first events (seq 1..n) atomically.

        With ``lease_owner`` the creator also holds the lease (epoch 1) and gets it
        back. Raises Conflict if the id exists.
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

    def sweep_blobs(self, *, before: float, dry_run: bool = False) -> tuple[int, int]:
        """Delete the snapshot pages that no snapshot references and that were written
        or touched before ``before``; ``(pages, bytes)`` deleted (``dry_run``: that would
        be). Artifacts and blobs of unknown kind are never deleted."""
        ...

    def get_blobs(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of these digests; absent digests are left out (not an
        error). Not verified against the digests: that is the caller's choice."""
        ...

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

    def get_effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key, or None."""
        ...

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

    def record_audit(
        self, run_id: str | None, action: str, detail: str, *, actor: str | None, now: float
    ) -> None:
        """Append a record to the audit log (independent of any run's lease)."""
        ...

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        """A run's audit records, oldest first."""
        ...

    def request_cancel(self, run_id: str, *, compensate: bool, now: float) -> None:
        """Flag the run so that the process executing it stops at its next step."""
        ...

    # -- the queue and its workers (tether.services.worker) --

    def enqueue(
        self, run: NewRun, events: Sequence[NewEvent], *, now: float, max_depth: int | None
    ) -> tuple[str, bool]:
        """Create a queued run unless its id or its (queue, dedup_key) is already taken, and
        tell waiting workers in the same transaction (PostgreSQL: NOTIFY; SQLite: they poll).

        Returns ``(run_id, created)``: the existing run's id when not created. Raises
        QueueFull when the queue already holds ``max_depth`` queued runs.
        """
        ...

    # Whether a worker's threads should claim at the same time: True where a claim can
    # share a commit with the other writes in flight (PostgreSQL's group commit), False
    # where each claim is a write transaction of its own that would only queue behind the
    # others (SQLite), so that one claim at a time takes every slot that came free.
    concurrent_claims: bool

    # Called with (run id, epoch) when a posted append (a worker run's final event) was
    # not committed and will not be retried: the run's lease must be given back, or the
    # heartbeat would extend it while the worker lives (App.let_go). Set by the App.
    unwritten_end: Callable[[str, int], None] | None

    def claim_next(
        self, queues: Sequence[QueueLimits], *, owner: str, ttl: float, now: float, capacity: int
    ) -> list[tuple[RunRecord, Lease]]:
        """Claim up to ``capacity`` runs from ``queues`` (in the order given), best first:
        queued and due, waiting and due (timer, timeout) or running under an expired lease.

        Each claim bumps the fencing token. Never exceeds a queue's limits, whatever
        other workers claim concurrently. Returns the rows as the claim left them
        (``running``, the new epoch) with the new leases.
        """
        ...

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

    def remove_worker(self, worker_id: str, *, expire_leases: bool) -> None:
        """Forget a worker; with ``expire_leases`` its runs become claimable at once."""
        ...

    def clock_offset(self, now: Callable[[], float]) -> float:
        """Seconds the database's clock is ahead of ``now`` (this process's clock, in seconds
        since the epoch; negative: behind).
        Leases are due times from one process's clock checked against another's, so
        processes on several machines need their clocks to agree (0.0 where they share
        one: SQLite)."""
        ...

    def workers_sharing(self, workers: int) -> None:
        """A hint from a worker of this process: ``workers`` live workers share the
        database (a store may size its batching to it; SQLite: no-op)."""
        ...

    def notify_work(self, queue: str) -> None:
        """Tell waiting workers that ``queue`` has work (PostgreSQL NOTIFY; SQLite: no-op)."""
        ...

    def wait_for_work(self, queues: Sequence[str], timeout: float, wake: threading.Event) -> None:
        """Block until work may be available in ``queues``, ``wake`` is set, or ``timeout``
        seconds pass (PostgreSQL: LISTEN; SQLite: a short poll)."""
        ...

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
        ...

    # -- retention (tether gc) ----------------------------------------------

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

    # -- raw transactions (tether.context.memory, tether.context.artifacts) ---------------------

    dialect: str  # "sqlite" | "postgres": the sql/<dialect>/ folder of named queries

    def transaction(self) -> AbstractContextManager[Any]:
        """A context manager yielding the raw DB-API connection inside one transaction.

        For modules that keep their own tables and named queries in
        ``sql/<dialect>/<module>.sql`` (tether.context.memory, tether.context.artifacts). Everything
        executed in the block commits together when it exits normally, and rolls back
        when it raises (the exception propagates). Driver errors, in the block or at
        commit, are raised as StoreError. Placeholders are the driver's (``:name`` for
        sqlite3, ``%(name)s`` for psycopg). The connection must not be used after the
        block, and no other store method may be called inside it (SQLite: one
        connection per thread, already in a write transaction; PostgreSQL: a second
        pooled connection could wait on this one's locks).
        """
        ...


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
