"""The engine's metrics hook with the real Prometheus recorder, on both backends: what a
run's steps did is counted once (replays are not), and a lease lost to another worker is
counted; with the hook off nothing is recorded anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _observed import priced_agent

import tether
from tether.engine import observe

metrics = pytest.importorskip("tether.services.metrics")  # the metrics extra
pytest.importorskip("prometheus_client")

pytestmark = pytest.mark.conformance


@pytest.fixture
def registry(app: tether.App) -> Iterator[Any]:
    reg = metrics.registry(app, with_engine=True)
    yield reg
    observe.install(None)


def _value(reg: Any, name: str, **labels: str) -> float:
    got = reg.get_sample_value(name, labels)
    return 0.0 if got is None else float(got)


def test_steps_model_calls_tokens_cost_and_retries_are_counted_once(
    app: tether.App, registry: Any
) -> None:
    priced = priced_agent(app)
    handle = app.run(priced)
    assert _value(registry, "tether_step_seconds_count", kind="llm", agent="priced") == 1
    assert _value(registry, "tether_step_seconds_count", kind="step", agent="priced") == 1
    assert _value(registry, "tether_model_call_seconds_count", agent="priced") == 1
    assert _value(registry, "tether_tokens_total", agent="priced", direction="input") == 7
    assert _value(registry, "tether_tokens_total", agent="priced", direction="output") == 2
    assert _value(registry, "tether_cost_total", agent="priced") == 0.25
    assert _value(registry, "tether_step_retries_total", kind="step", agent="priced") == 1
    app.resume(handle.id)  # a completed run: replayed from the log, nothing executes
    assert _value(registry, "tether_step_seconds_count", kind="llm", agent="priced") == 1


def test_a_lease_lost_to_another_worker_is_counted(app: tether.App, registry: Any) -> None:
    def stolen() -> str:
        step = tether.current_step()
        holder = app.store.get_run(step.run_id).lease_owner
        app.store.claim(step.run_id, owner="thief", ttl=60, now=app.clock.now(), takeover=holder)
        return "late"

    @app.agent
    def robbed(run: tether.Run) -> str:
        return str(run.llm("ask", stolen))

    with pytest.raises(tether.TetherError):
        app.run(robbed)
    assert _value(registry, "tether_leases_lost_total") == 1


def test_with_the_hook_off_nothing_is_recorded(app: tether.App) -> None:
    reg = metrics.registry(app, with_engine=True)
    observe.install(None)

    @app.agent
    def plain(run: tether.Run) -> int:
        return int(run.llm("ask", lambda: {"usage": {"input_tokens": 1}}) is not None)

    app.run(plain)
    assert _value(reg, "tether_step_seconds_count", kind="llm", agent="plain") == 0


def test_a_cost_computed_from_prices_is_counted(backend: Any) -> None:
    priced = tether.open(backend.url, prices={"m-1": tether.Price(input=1.0, output=2.0)})
    reg = metrics.registry(priced, with_engine=True)
    try:

        @priced.agent
        def cheap(run: tether.Run) -> None:
            usage = {"input_tokens": 1_000_000, "output_tokens": 500_000}
            run.llm("ask", lambda: {"model": "m-1", "text": "ok", "usage": usage})

        priced.run(cheap)
        assert _value(reg, "tether_cost_total", agent="cheap") == pytest.approx(2.0)
        assert _value(reg, "tether_tokens_total", agent="cheap", direction="input") == 1e6
    finally:
        observe.install(None)
        priced.close()
