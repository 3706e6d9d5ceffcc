"""The context cache on a recorded long agent session (bench/incident.py, replayed as in
bench/context_replay.py): fewer input tokens, few faults, and no fact a later call uses
is lost: each one is in the context sent, or behind a handle that recall resolves."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether
from tether.context import tokens
from tether.context import window as context

BENCH = Path(__file__).resolve().parents[2] / "bench"
# bench/ on the path only for these imports: left there, it hid packages that bench/
# names a file after (bench/langgraph.py) from every test collected after this one
_path = list(sys.path)
sys.path.insert(0, str(BENCH))
try:
    import context_replay  # (it puts bench/ and src/ on the path too)
    from incident import CALLS, SYSTEM, TOOLS
finally:
    sys.path[:] = _path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[tether.App, ...]]:
    app = tether.open(str(tmp_path_factory.mktemp("replay") / "replay.db"))
    base = context_replay.replay(app, cache=False)
    cached = context_replay.replay(app, cache=True)
    yield app, base, cached
    app.close()


def test_the_recording_is_consistent_without_a_cache(replays: tuple[object, ...]) -> None:
    _, base, _ = replays
    assert isinstance(base, context_replay.Replay)
    assert base.lost == [] and base.faults == 0 and base.calls == len(CALLS) == 80


def test_the_cache_sends_far_fewer_tokens_with_few_faults(replays: tuple[object, ...]) -> None:
    _, base, cached = replays
    assert isinstance(base, context_replay.Replay) and isinstance(cached, context_replay.Replay)
    saved = 1 - cached.total / base.total
    assert saved >= 0.20, saved
    assert cached.fault_rate < 0.05, (cached.recall_faults, cached.stub_faults)
    assert (cached.recall_faults, cached.stub_faults) == (2, 1)  # as the recording says
    assert max(cached.per_call) <= context_replay.BUDGET
    # the context's own report, read from the history, counts the same faults
    assert cached.report["faults"] == cached.faults and cached.report["calls"] == cached.calls


def test_no_fact_a_later_call_uses_is_lost(replays: tuple[object, ...]) -> None:
    app, _, cached = replays
    assert isinstance(app, tether.App) and isinstance(cached, context_replay.Replay)
    assert cached.lost == []
    session = app.session("incident-cache")
    ctx = context.build(session, budget_tokens=context_replay.BUDGET, tools=TOOLS, system=SYSTEM)
    recalled = {h.id: tokens.text_of(context.recall(session, h.id)) for h in ctx.paged}
    facts = {fact for call in CALLS for fact in call.uses}
    unreachable = [
        f for f in facts if f not in ctx.text() and not any(f in r for r in recalled.values())
    ]
    assert unreachable == []
    behind_handles = [f for f in facts if f not in ctx.text()]
    assert "41  RETRY = Policy(max_attempts=3" in behind_handles  # reachable by recall only
