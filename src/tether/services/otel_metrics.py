"""OpenTelemetry metrics (``tether.open(url, metrics=...)``, extra ``tether[otel]``).

The same numbers as the Prometheus endpoint (:mod:`tether.services.metrics`), handed to
the user's OpenTelemetry ``MeterProvider`` (the global one, or the one given in
:class:`Metrics`) so that its readers and exporters (OTLP, Prometheus, a vendor's) send
them wherever its traces go:

- what this process's executions did, as it happens (the engine's observer hook,
  :mod:`tether.engine.observe`): step and execution durations, model-call durations and
  token usage under the GenAI semantic conventions' names
  (``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``), cost, retries,
  leases lost, executions by outcome;
- what the database holds, read when the provider collects (observable gauges, one
  ``Store.gauges`` read per collection however many gauges ask): unfinished runs by
  status and agent, queue depth and oldest wait, runs in doubt, live workers.

Nothing here imports OpenTelemetry until metrics are configured. One set of instruments
per meter provider: two Apps of a process on one provider share it (the engine's hook is
the process's), and each App's database is read for the gauges while it is open.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from tether.engine import observe
from tether.errors import InvalidInput, TetherError
from tether.services.metrics import LIVE_AFTER_TTLS
from tether.services.workers import LeaseSetup
from tether.version import __version__


class App(LeaseSetup, Protocol):
    """What metrics need of an App: its store, clock and lease ttl, and the callbacks its
    ``close`` runs."""

    @property
    def _on_close(self) -> list[Callable[[Any], None]]: ...


_GAUGE_CACHE = 1.0  # seconds: the gauges of one collection share one database read


class Metrics:
    """Where tether's OpenTelemetry metrics go: ``meter_provider`` (None: OpenTelemetry's
    global one). Pass as ``tether.open(url, metrics=...)``; ``metrics=True`` is
    ``Metrics()``."""

    __slots__ = ("meter_provider",)

    def __init__(self, meter_provider: Any = None) -> None:
        self.meter_provider = meter_provider

    def __repr__(self) -> str:
        return f"Metrics({self.meter_provider!r})"


def configured(value: Any) -> Metrics | None:
    """``tether.open(metrics=...)``: None/False off, True the global provider, or a
    Metrics; checked (OpenTelemetry importable) before the store is opened."""
    if value is None or value is False:
        return None
    if value is True:
        value = Metrics()
    if not isinstance(value, Metrics):
        raise InvalidInput(
            f"metrics is True (OpenTelemetry's global meter provider), False, or "
            f"tether.Metrics(meter_provider), not {value!r}"
        )
    try:
        import opentelemetry.metrics  # noqa: F401
    except ImportError:
        raise InvalidInput("metrics need OpenTelemetry: pip install 'tether[otel]'") from None
    return value


# one _Meters per provider (by identity), for the process's life: the instruments live in
# the provider, which cannot forget them; Apps come and go
_BY_PROVIDER: dict[int, _Meters] = {}
_LOCK = threading.Lock()


def attach(app: App, metrics: Metrics) -> None:
    """Report ``app``'s database and this process's executions to ``metrics``' provider."""
    from opentelemetry import metrics as api

    provider = metrics.meter_provider or api.get_meter_provider()
    with _LOCK:
        meters = _BY_PROVIDER.get(id(provider))
        if meters is None or meters.provider is not provider:
            meters = _BY_PROVIDER[id(provider)] = _Meters(provider)
        observe.attach(meters)  # (again, if its Apps had all closed)
        meters.apps.add(app)
    app._on_close.append(meters.release)


def detach_all() -> None:
    """Stop reporting to every provider (tests: each starts from none)."""
    with _LOCK:
        for meters in _BY_PROVIDER.values():
            observe.detach(meters)
            meters.apps.clear()
        _BY_PROVIDER.clear()


class _Meters:
    """The engine's observer (:class:`tether.engine.observe.Observer`) as OpenTelemetry
    instruments of one provider, and the database gauges of the Apps attached to it.
    Attributes are agents, step kinds, queues and outcomes, never run ids."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        self.provider = provider
        self.apps: weakref.WeakSet[App] = weakref.WeakSet()
        self._read: tuple[float, list[tuple[str, Any]]] = (0.0, [])
        self._Observation = Observation
        m = provider.get_meter("tether", __version__)
        self.steps = m.create_histogram(
            "tether.step.duration", unit="s", description="Time an executed step's call took"
        )
        self.model_calls = m.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration (a model call: run.llm)",
        )
        self.tokens = m.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens of a model call, as its result reports them",
        )
        self.cost = m.create_counter(
            "tether.cost", description="Cost of the model calls, as their results report it"
        )
        self.retries = m.create_counter(
            "tether.step.retries", description="Failed attempts of a step that scheduled another"
        )
        self.leases_lost = m.create_counter(
            "tether.leases.lost", description="Appends refused: another worker holds the run now"
        )
        self.executions = m.create_counter(
            "tether.executions", description="Executions of runs by this process, by outcome"
        )
        self.execution_seconds = m.create_histogram(
            "tether.execution.duration", unit="s", description="Time an execution held its slot"
        )

        def gauge(name: str, unit: str, description: str) -> None:
            def callback(options: CallbackOptions) -> Iterator[Observation]:
                return self._observations(name)

            m.create_observable_gauge(name, [callback], unit=unit, description=description)

        gauge("tether.runs", "{run}", "Unfinished runs by status and agent")
        gauge("tether.queue.depth", "{run}", "Queued runs")
        gauge("tether.queue.oldest_wait", "s", "How long the oldest claimable queued run waited")
        gauge("tether.runs.in_doubt", "{run}", "Runs waiting for a person to resolve a call")
        gauge("tether.workers.live", "{worker}", "Workers whose heartbeat is recent")
        gauge("tether.database.up", "1", "Whether the last collection read the database")

    def release(self, app: App) -> None:
        """``app`` closed: its database is no longer read; with no App left, the engine's
        hook stops telling this provider (a later ``open`` attaches it again: its
        instruments stay, the provider cannot forget them)."""
        with _LOCK:
            self.apps.discard(app)
            if not self.apps:
                observe.detach(self)

    # -- the engine's observer ---------------------------------------------------------

    def step(self, kind: str, agent: str, seconds: float, usage: Mapping[str, Any] | None) -> None:
        self.steps.record(seconds, {"tether.step.kind": kind, "gen_ai.agent.name": agent})
        if kind != "llm":
            return
        op = {"gen_ai.operation.name": "chat", "gen_ai.agent.name": agent}
        self.model_calls.record(seconds, op)
        if usage:
            for direction in ("input", "output"):
                n = usage.get(f"{direction}_tokens")
                if isinstance(n, int | float) and n >= 0:
                    self.tokens.record(n, {**op, "gen_ai.token.type": direction})
            cost = usage.get("cost")
            if isinstance(cost, int | float) and cost > 0:
                self.cost.add(cost, {"gen_ai.agent.name": agent})

    def retry(self, kind: str, agent: str) -> None:
        self.retries.add(1, {"tether.step.kind": kind, "gen_ai.agent.name": agent})

    def lease_lost(self) -> None:
        self.leases_lost.add(1)

    def execution(self, agent: str, outcome: str, seconds: float) -> None:
        self.executions.add(1, {"gen_ai.agent.name": agent, "tether.outcome": outcome})
        self.execution_seconds.record(seconds, {"gen_ai.agent.name": agent})

    # -- the database's gauges ---------------------------------------------------------

    def _observations(self, name: str) -> Iterator[Any]:
        for gauge, (value, attributes) in self._gauges():
            if gauge == name:
                yield self._Observation(value, attributes)

    def _gauges(self) -> list[tuple[str, Any]]:
        """Every gauge of every attached open App, read once per collection."""
        with _LOCK:
            at, read = self._read
            if time.monotonic() - at > _GAUGE_CACHE:
                read = [g for app in list(self.apps) for g in _read_app(app)]
                self._read = (time.monotonic(), read)
        return read


def _read_app(app: App) -> list[tuple[str, tuple[float, dict[str, str]]]]:
    if getattr(app, "_closed", False):
        return []
    out: list[tuple[str, tuple[float, dict[str, str]]]] = []
    try:
        now = app.clock.now()
        g = app.store.gauges(now)
        workers = app.store.list_workers()
    except TetherError:
        return [("tether.database.up", (0, {}))]
    out.append(("tether.database.up", (1, {})))
    for status, agent, n in g.active:
        out.append(("tether.runs", (n, {"tether.status": status, "gen_ai.agent.name": agent})))
    for queue, n, since in g.queues:
        q = {"tether.queue": queue or ""}
        out.append(("tether.queue.depth", (n, q)))
        waited = 0.0 if since is None else max(0.0, now - since)
        out.append(("tether.queue.oldest_wait", (waited, q)))
    out.append(("tether.runs.in_doubt", (g.in_doubt, {})))
    live = sum(now - w.heartbeat_at <= LIVE_AFTER_TTLS * app.lease_ttl for w in workers)
    out.append(("tether.workers.live", (live, {})))
    return out
