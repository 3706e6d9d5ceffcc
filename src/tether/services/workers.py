"""The workers' registry: who is alive, and forgetting the dead (``tether workers``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from tether.model.clock import Clock, owner_is_dead_local
from tether.store import RunCount, Store, WorkerRecord


class LeaseSetup(Protocol):
    """What :func:`reap_dead_workers` needs: a store, its clock and the lease ttl (a
    :class:`~tether.engine.deps.Deps`, or anything with them)."""

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def lease_ttl(self) -> float: ...


def reap_dead_workers(setup: LeaseSetup, *, exclude: str | None = None) -> list[WorkerRecord]:
    """Forget workers whose process is gone, or whose heartbeat is long past; their
    leases become claimable at once. Returns the workers left.

    A process is known gone only on its own host and pid namespace (its worker id says
    which: see ``clock.owner_is_dead_local``); a worker in another container, even one
    sharing this host's name, is left to its heartbeat and leases. So is a worker given
    an id of its own (``worker_id``), which names no process.
    """
    left = []
    now = setup.clock.now()
    for w in setup.store.list_workers():
        gone = now - w.heartbeat_at > 10 * setup.lease_ttl
        if w.id != exclude and (gone or owner_is_dead_local(w.id)):
            setup.store.remove_worker(w.id, expire_leases=True)
            continue
        left.append(w)
    return left


def describe(
    workers: Iterable[WorkerRecord], leases: dict[str, list[str]], now: float
) -> list[dict[str, Any]]:
    """Plain data for ``tether workers``."""
    return [
        {
            "id": w.id,
            "host": w.host,
            "pid": w.pid,
            "queues": w.queues,
            "concurrency": w.concurrency,
            "heartbeat_age_s": round(now - w.heartbeat_at, 3),
            "stopping": bool(w.stopping),
            "runs": leases.get(w.id, []),
            "serves": None if w.serves is None else str(w.serves),  # None: every run
        }
        for w in workers
    ]


UNFINISHED = ("queued", "running", "waiting", "blocked")


def unserved(
    workers: Iterable[WorkerRecord], counts: Iterable[RunCount], now: float, ttl: float
) -> list[tuple[str, str | None, int]]:
    """``(agent, version, runs)`` of the unfinished runs that no live worker (a heartbeat
    within ``3 * ttl``) serves, when some worker is live (none live: nothing to say): they
    wait in their queues until a worker with their version's code starts (docs/deploys.md)."""
    live = [w for w in workers if now - w.heartbeat_at <= 3 * ttl]
    left: dict[tuple[str, str | None], int] = {}
    for c in counts:
        if c.status not in UNFINISHED or not live:
            continue
        if not any(w.serves is None or w.serves.serves(c.agent, c.version) for w in live):
            left[(c.agent, c.version)] = left.get((c.agent, c.version), 0) + c.runs
    return [(agent, version, n) for (agent, version), n in left.items()]
