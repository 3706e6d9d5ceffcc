"""OpenTelemetry metrics (``tether.open(url, metrics=...)``) on both backends, read with the
OpenTelemetry SDK's in-memory reader: a run's steps, model-call durations, tokens (GenAI
names), cost and retries recorded once (a replay records nothing); the database gauges
read at collection; Prometheus beside it sees the same steps; a closed App stops
reporting its database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _observed import priced_agent

import tether
from tether.engine import observe
from tether.services import otel_metrics

sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

pytestmark = pytest.mark.conformance


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    yield InMemoryMetricReader()
    otel_metrics.detach_all()
    observe.install(None)


@pytest.fixture
def metered(backend: Any, reader: InMemoryMetricReader) -> Iterator[tether.App]:
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    a = tether.open(backend.url, metrics=tether.Metrics(provider))
    yield a
    a.close()


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def _one(points: list[Any], **attributes: Any) -> Any:
    found = [p for p in points if dict(p.attributes) == attributes]
    assert len(found) == 1, (attributes, [dict(p.attributes) for p in points])
    return found[0]


def test_steps_model_calls_tokens_cost_and_retries_recorded_once(
    metered: tether.App, reader: InMemoryMetricReader
) -> None:
    priced = priced_agent(metered)
    handle = metered.run(priced)
    metered.resume(handle.id)  # completed: replayed from the log, nothing executes again
    p = _points(reader)
    agent = {"gen_ai.agent.name": "priced"}
    assert _one(p["tether.step.duration"], **agent, **{"tether.step.kind": "llm"}).count == 1
    assert _one(p["tether.step.duration"], **agent, **{"tether.step.kind": "step"}).count == 1
    chat = {**agent, "gen_ai.operation.name": "chat"}
    assert _one(p["gen_ai.client.operation.duration"], **chat).count == 1
    tokens = p["gen_ai.client.token.usage"]
    assert _one(tokens, **chat, **{"gen_ai.token.type": "input"}).sum == 7
    assert _one(tokens, **chat, **{"gen_ai.token.type": "output"}).sum == 2
    assert _one(p["tether.cost"], **agent).value == 0.25
    assert _one(p["tether.step.retries"], **agent, **{"tether.step.kind": "step"}).value == 1


def test_database_gauges_are_read_at_collection(
    metered: tether.App, reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(otel_metrics, "_GAUGE_CACHE", 0.0)  # every collection reads

    @metered.agent
    def greet(run: tether.Run, name: str) -> str:
        return name

    metered.start(greet, "ann")
    metered.start(greet, "bob", queue="later")
    p = _points(reader)
    assert _one(p["tether.database.up"]).value == 1
    runs = _one(p["tether.runs"], **{"tether.status": "queued", "gen_ai.agent.name": "greet"})
    assert runs.value == 2
    assert _one(p["tether.queue.depth"], **{"tether.queue": "later"}).value == 1
    assert _one(p["tether.runs.in_doubt"]).value == 0
    metered.worker(concurrency=1).run(until_idle=True)  # the default queue's run executes
    p = _points(reader)
    assert _one(p["tether.queue.depth"], **{"tether.queue": "later"}).value == 1
    assert "default" not in {dict(q.attributes)["tether.queue"] for q in p["tether.queue.depth"]}
    done = {"gen_ai.agent.name": "greet", "tether.outcome": "completed"}
    assert _one(p["tether.executions"], **done).value == 1


def test_prometheus_beside_opentelemetry_both_count(
    metered: tether.App, reader: InMemoryMetricReader
) -> None:
    prom = pytest.importorskip("tether.services.metrics")
    pytest.importorskip("prometheus_client")
    reg = prom.registry(metered, with_engine=True)

    @metered.agent
    def both(run: tether.Run) -> int:
        return int(run.step("one", lambda: 1))

    metered.run(both)
    labels = {"kind": "step", "agent": "both"}
    assert reg.get_sample_value("tether_step_seconds_count", labels) == 1
    kind = {"gen_ai.agent.name": "both", "tether.step.kind": "step"}
    assert _one(_points(reader)["tether.step.duration"], **kind).count == 1


def test_a_closed_app_stops_reporting_its_database(
    metered: tether.App, reader: InMemoryMetricReader
) -> None:
    metered.close()
    p = _points(reader)
    assert "tether.runs" not in p and "tether.database.up" not in p


def test_metrics_config_is_checked_before_opening(tmp_path: Any) -> None:
    with pytest.raises(tether.InvalidInput, match=r"tether\.Metrics"):
        tether.open(str(tmp_path / "x.db"), metrics="prometheus")
    assert not (tmp_path / "x.db").exists()


def test_reopened_on_the_same_provider_reports_again(backend: Any) -> None:
    reader = InMemoryMetricReader()
    metrics = tether.Metrics(sdk_metrics.MeterProvider(metric_readers=[reader]))
    try:
        first = tether.open(backend.url, metrics=metrics)
        first.close()
        assert observe.OBSERVER is None  # its last App closed: the hook is off
        second = tether.open(backend.url, metrics=metrics)

        @second.agent
        def again(run: tether.Run) -> int:
            return int(run.step("one", lambda: 1))

        second.start(again, run_id="queued-one")
        p = _points(reader)
        queued = _one(p["tether.runs"], **{"tether.status": "queued", "gen_ai.agent.name": "again"})
        assert queued.value == 1
        second.close()
    finally:
        otel_metrics.detach_all()
        observe.install(None)
