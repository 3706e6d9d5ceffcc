"""Prometheus metrics: the engine's counters and histograms, and the database's gauges.

Needs the ``metrics`` extra (``prometheus_client``), imported only by :func:`registry`:
``import tether`` and a worker without ``--metrics-port`` never load it.

Two kinds of numbers, both on one :class:`~prometheus_client.CollectorRegistry`:

- what this process did (``with_engine=True``; a worker): a :class:`Recorder` is installed as
  :data:`tether.engine.observe.OBSERVER` and counts steps, model calls, tokens, cost,
  retries, leases lost and executions as they happen;
- what the database holds, read at each scrape (:class:`DatabaseCollector`): the unfinished
  runs by status and agent, the queues' depths and oldest wait, the runs in doubt and the
  live workers. Each is a range of an index (``Store.gauges``): the finished runs, however
  many, are never counted, and the events are never read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tether.engine import observe
from tether.errors import TetherError
from tether.services.workers import LeaseSetup

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

# seconds: a step of pure work takes microseconds, a model call seconds to minutes
STEP_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf"))
MODEL_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, float("inf"))
LIVE_AFTER_TTLS = 3  # a worker whose heartbeat is older than 3 lease ttls is not counted live


def missing_extra() -> str:
    """The sentence a command prints when prometheus_client is not installed."""
    return "metrics need the metrics extra: pip install 'tether[metrics]'"


def registry(app: LeaseSetup, *, with_engine: bool) -> CollectorRegistry:
    """A registry with ``app``'s (an App, or anything with its store, clock and lease
    ttl) database gauges and, ``with_engine``, this process's
    engine metrics (a :class:`Recorder` installed as the engine's observer). Raises
    ImportError without the extra (see :func:`missing_extra`)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=True)
    reg.register(DatabaseCollector(app))
    if with_engine:  # the process's one Prometheus recorder (OpenTelemetry's stays beside)
        global _RECORDER
        if _RECORDER is not None:
            observe.detach(_RECORDER)
        _RECORDER = Recorder(reg)
        observe.attach(_RECORDER)
    return reg


_RECORDER: Recorder | None = None


def text(reg: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``reg`` (what GET /metrics answers)."""
    from prometheus_client import generate_latest

    return generate_latest(reg)


def serve(reg: CollectorRegistry, host: str, port: int) -> tuple[str, int]:
    """Serve ``reg`` over HTTP on ``host:port`` in a daemon thread (port 0: any free one);
    return the address it listens on."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=reg)
    bound_host, bound_port = server.server_address[:2]
    return str(bound_host), int(bound_port)


class Recorder:
    """The engine's observer (:class:`tether.engine.observe.Observer`) as Prometheus
    counters and histograms, labelled by agent (and step kind): never by run id."""

    def __init__(self, reg: CollectorRegistry) -> None:
        from prometheus_client import Counter, Histogram

        self.steps = Histogram(
            "tether_step_seconds",
            "Time a step's call took when it executed (replayed steps are not counted)",
            ["kind", "agent"],
            buckets=STEP_BUCKETS,
            registry=reg,
        )
        self.model_calls = Histogram(
            "tether_model_call_seconds",
            "Time a model call (an llm step) took",
            ["agent"],
            buckets=MODEL_BUCKETS,
            registry=reg,
        )
        self.tokens = Counter(
            "tether_tokens",
            "Tokens of the model calls, as their results report them",
            ["agent", "direction"],
            registry=reg,
        )
        self.cost = Counter(
            "tether_cost",
            "Cost of the model calls, as their results report it",
            ["agent"],
            registry=reg,
        )
        self.retries = Counter(
            "tether_step_retries",
            "Failed attempts of a step that scheduled another",
            ["kind", "agent"],
            registry=reg,
        )
        self.leases_lost = Counter(
            "tether_leases_lost",
            "Appends refused: another worker holds the run now",
            registry=reg,
        )
        self.executions = Counter(
            "tether_executions",
            "Executions of runs by this process, by how they ended",
            ["agent", "outcome"],
            registry=reg,
        )
        self.execution_seconds = Histogram(
            "tether_execution_seconds",
            "Time an execution of a run held its worker slot",
            ["agent"],
            buckets=STEP_BUCKETS,
            registry=reg,
        )

        # labels() validates and locks on every call: each (kind, agent)'s children are
        # looked up once, so a step costs its observations alone
        self._children: dict[tuple[str, str], tuple[Any, ...]] = {}

    def _of(self, kind: str, agent: str) -> tuple[Any, ...]:
        found = self._children.get((kind, agent))
        if found is None:
            found = (self.steps.labels(kind, agent),)
            if kind == "llm":
                found += (
                    self.model_calls.labels(agent),
                    self.tokens.labels(agent, "input"),
                    self.tokens.labels(agent, "output"),
                    self.cost.labels(agent),
                )
            self._children[(kind, agent)] = found
        return found

    def step(self, kind: str, agent: str, seconds: float, usage: Mapping[str, Any] | None) -> None:
        children = self._of(kind, agent)
        children[0].observe(seconds)
        if kind != "llm":
            return
        children[1].observe(seconds)
        if usage:
            children[2].inc(usage.get("input_tokens", 0))
            children[3].inc(usage.get("output_tokens", 0))
            children[4].inc(usage.get("cost", 0.0))

    def retry(self, kind: str, agent: str) -> None:
        self.retries.labels(kind, agent).inc()

    def lease_lost(self) -> None:
        self.leases_lost.inc()

    def execution(self, agent: str, outcome: str, seconds: float) -> None:
        self.executions.labels(agent, outcome).inc()
        self.execution_seconds.labels(agent).observe(seconds)


class DatabaseCollector:
    """Gauges read from the database at each scrape (one ``Store.gauges`` read and the
    workers' table). A database that does not answer gives ``tether_database_up 0`` and
    the scrape still succeeds."""

    def __init__(self, app: LeaseSetup) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        return []  # read at scrape time: nothing to describe up front

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily("tether_database_up", "Whether the last scrape read the database")
        try:
            families = list(self._families())
        except TetherError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        now = self.app.clock.now()
        g = self.app.store.gauges(now)
        runs = GaugeMetricFamily(
            "tether_runs", "Unfinished runs by status and agent", labels=["status", "agent"]
        )
        for status, agent, n in g.active:
            runs.add_metric([status, agent], n)
        depth = GaugeMetricFamily("tether_queue_depth", "Queued runs", labels=["queue"])
        wait = GaugeMetricFamily(
            "tether_queue_oldest_wait_seconds",
            "How long the oldest claimable queued run has waited",
            labels=["queue"],
        )
        for queue, n, since in g.queues:
            depth.add_metric([queue or ""], n)
            wait.add_metric([queue or ""], 0.0 if since is None else max(0.0, now - since))
        doubt = GaugeMetricFamily(
            "tether_runs_in_doubt", "Runs waiting for a person to resolve a tool call in doubt"
        )
        doubt.add_metric([], g.in_doubt)
        yield from (runs, depth, wait, doubt, *self._workers(now))

    def _workers(self, now: float) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        live = GaugeMetricFamily(
            "tether_workers_live", "Workers whose heartbeat is recent (3 lease ttls)"
        )
        age = GaugeMetricFamily(
            "tether_worker_heartbeat_age_seconds",
            "Seconds since each registered worker's last heartbeat",
            labels=["worker"],
        )
        recent = 0
        for w in self.app.store.list_workers():
            age.add_metric([w.id], max(0.0, now - w.heartbeat_at))
            recent += now - w.heartbeat_at <= LIVE_AFTER_TTLS * self.app.lease_ttl
        live.add_metric([], recent)
        yield from (live, age)
