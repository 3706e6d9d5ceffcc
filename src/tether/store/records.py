"""The values the store takes and returns: frozen dataclasses, never raw rows.

Importable from :mod:`tether.store` as well (``from tether.store import RunRecord``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.model.events import Event

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
    waiting_for: str | None = None  # approval:NAME | signal:NAME | timer | doubt:KEY | child:ID
    cancel_requested: int = 0  # 1: stop at the next step; 2: and compensate
    dedup_key: str | None = None
    concurrency_key: str | None = None
    claimed_at: float | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a page of the run list holds (RunLog.page_runs): each field given narrows
    it (None: any). ``text``: the run id or the agent name starts with it; the times are
    ``created_after <= created_at < created_before``; ``tenant`` is the runs' owner;
    ``version`` the agent's version the runs recorded (runs without one never match)."""

    status: str | None = None
    agent: str | None = None
    queue: str | None = None
    session: str | None = None
    tenant: str | None = None
    text: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    version: str | None = None  # the agent's version the runs recorded


@dataclass(frozen=True, slots=True)
class RunCount:
    """How many runs of one agent at one version have one status (RunLog.run_counts)."""

    agent: str
    version: str | None
    status: str
    runs: int


@dataclass(frozen=True, slots=True)
class UsageTotal:
    """Model usage summed over runs (RunLog.usage_totals): ``key`` is the agent's name or
    the session's id (None: runs outside a session); ``runs`` with a model call, ``calls``."""

    key: str | None
    runs: int
    calls: int
    cost: float
    input_tokens: int
    output_tokens: int


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
class Serving:
    """Which runs a worker claims, by agent and version: every run of an agent not in
    ``pinned``; of one in it, only the ``(agent, version)`` pairs of ``served``."""

    pinned: tuple[str, ...]
    served: tuple[tuple[str, str | None], ...]

    def params(self) -> dict[str, str | None]:
        """The claim statements' parameters: JSON arrays (pairs for ``served``)."""
        return {"pinned": json.dumps(self.pinned), "served": json.dumps(self.served)}

    def serves(self, agent: str, version: str | None) -> bool:
        """Whether a worker of this filter claims the runs of ``agent`` at ``version``."""
        return agent not in self.pinned or (agent, version) in self.served

    def dumps(self) -> str:
        """As the workers table keeps it (schema 18)."""
        return json.dumps({"pinned": self.pinned, "served": self.served})

    @classmethod
    def loads(cls, text: str | None) -> Serving | None:
        """From :meth:`dumps` (None: a worker that serves every run). Text the database
        holds: anything but that shape reads as None, never an error."""
        if not text:
            return None
        try:
            data = json.loads(text)
            pinned = tuple(str(a) for a in data["pinned"])
            served = tuple((str(a), None if v is None else str(v)) for a, v in data["served"])
        except (ValueError, TypeError, KeyError):
            return None
        return cls(pinned, served)

    def __str__(self) -> str:
        """``agent@version`` for each pair it serves (``agent`` alone: without a version),
        then ``+ other agents``: how ``tether workers`` shows it."""
        pairs = [a if v is None else f"{a}@{v}" for a, v in self.served]
        return " ".join([*pairs, "+ other agents"])


# the claim statements' parameters of a worker that claims every run (no Serving)
CLAIM_ALL: dict[str, str | None] = {"pinned": None, "served": None}


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
    serves: Serving | None = None  # which runs it claims (None: every run)


@dataclass(frozen=True, slots=True)
class Gauges:
    """What a metrics scrape reads of the database (:meth:`Store.gauges`), each from an index.

    ``active``: ``(status, agent, runs)`` for the statuses a run leaves (queued, running,
    waiting, blocked); ``queues``: ``(queue, queued runs, oldest claimable time or None)``;
    ``in_doubt``: runs waiting for a person to resolve a tool call in doubt.
    """

    active: list[tuple[str, str, int]]
    queues: list[tuple[str | None, int, float | None]]
    in_doubt: int


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
class NewToken:
    """An API token about to be stored: never its plaintext, only the hash of it."""

    id: str  # the public part of ``tether_<id>_<secret>``
    name: str  # the identity recorded for the token's decisions (unique)
    role: str  # viewer | approver | operator | admin (tether.services.identity.Role)
    tenant: str | None  # None: every tenant
    hash: str = field(repr=False)  # hex SHA-256 of the whole plaintext token


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A stored API token (a row of the tokens table). Its ``hash`` is left out of its
    repr, so that a log line or a traceback holding a record shows no hash either."""

    id: str
    name: str
    role: str
    tenant: str | None
    hash: str = field(repr=False)
    created_at: float = 0.0
    revoked_at: float | None = None  # None: valid
    last_used_at: float | None = None  # noted at most once a minute


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
