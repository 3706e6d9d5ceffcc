"""The engine's one metrics hook: ``OBSERVER`` is None (metrics off) or an :class:`Observer`.

The journal and the worker test ``observe.OBSERVER is not None`` where a step finishes, a
step fails and is retried, a lease is lost and an execution ends: with metrics off that
test is the whole cost. :mod:`tether.services.metrics` installs an observer that feeds
Prometheus counters and histograms, :mod:`tether.services.otel_metrics` attaches one that
feeds OpenTelemetry instruments (both may: the hook then tells each); nothing here imports
a metrics library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Observer(Protocol):
    """What the engine reports, as it happens, in the process executing runs."""

    def step(self, kind: str, agent: str, seconds: float, usage: Mapping[str, Any] | None) -> None:
        """A step's call returned after ``seconds``; a model call's ``usage`` (tokens,
        cost) when its result reports one."""

    def retry(self, kind: str, agent: str) -> None:
        """A step's attempt failed and another is scheduled."""

    def lease_lost(self) -> None:
        """An append was refused: another worker holds the run now (fenced out)."""

    def execution(self, agent: str, outcome: str, seconds: float) -> None:
        """A worker's execution of a run ended: ``outcome`` is completed, waiting, failed,
        blocked, lost, interrupted, paused or error."""


OBSERVER: Observer | None = None


def install(observer: Observer | None) -> Observer | None:
    """Make ``observer`` the process's (None: metrics off); return the one it replaces."""
    global OBSERVER
    before, OBSERVER = OBSERVER, observer
    return before


def attach(observer: Observer) -> None:
    """Tell ``observer`` too, beside whichever the process has already."""
    present = _members(OBSERVER)
    if observer not in present:
        _set([*present, observer])


def detach(observer: Observer) -> None:
    """Stop telling ``observer`` (the others stay)."""
    _set([o for o in _members(OBSERVER) if o is not observer])


def _members(observer: Observer | None) -> list[Observer]:
    if observer is None:
        return []
    return list(observer.observers) if isinstance(observer, Tee) else [observer]


def _set(observers: list[Observer]) -> None:
    install(None if not observers else observers[0] if len(observers) == 1 else Tee(observers))


class Tee:
    """Several observers as one (Prometheus and OpenTelemetry in one process)."""

    def __init__(self, observers: list[Observer]) -> None:
        self.observers = tuple(observers)

    def step(self, kind: str, agent: str, seconds: float, usage: Mapping[str, Any] | None) -> None:
        for o in self.observers:
            o.step(kind, agent, seconds, usage)

    def retry(self, kind: str, agent: str) -> None:
        for o in self.observers:
            o.retry(kind, agent)

    def lease_lost(self) -> None:
        for o in self.observers:
            o.lease_lost()

    def execution(self, agent: str, outcome: str, seconds: float) -> None:
        for o in self.observers:
            o.execution(agent, outcome, seconds)
