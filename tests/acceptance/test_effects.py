"""Exactly-once effects under SIGKILL at every point of the tool path."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ledger import Ledger

import tether

pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_payments.py"))
POINTS = ["before_intent", "after_intent", "after_effect", "after_completion"]


@pytest.fixture
def aware() -> Iterator[Ledger]:
    ledger = Ledger(aware=True).start()
    yield ledger
    ledger.stop()


@pytest.fixture
def unaware() -> Iterator[Ledger]:
    ledger = Ledger(aware=False).start()
    yield ledger
    ledger.stop()


def _agent(
    db: str, url: str, doubt: str, crash: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, AGENT, db, url, *args, "--crash", crash, "--doubt", doubt],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _crash_then_resume(db: str, ledger: Ledger, doubt: str, point: str) -> dict[str, Any]:
    first = _agent(db, ledger.url, doubt, point, "start")
    assert first.returncode == -signal.SIGKILL, first.stderr
    with tether.open(db) as app:
        rid = app.runs()[0].id
    second = _agent(db, ledger.url, doubt, point, "resume", rid)
    assert second.returncode == 0, second.stderr
    out: dict[str, Any] = json.loads(second.stdout)
    return out


@pytest.mark.parametrize("point", POINTS)
def test_key_aware_service_sees_exactly_one_effect(
    tmp_path: Path, aware: Ledger, point: str
) -> None:
    db = str(tmp_path / "pay.db")
    out = _crash_then_resume(db, aware, "retry", point)
    assert out["status"] == "completed"
    assert len(aware.entries) == 1, aware.entries
    assert out["output"] == {"charge_id": 1}
    with tether.open(db) as app:
        state = app.get(out["id"])
        tool = state.steps[1]
        assert tool.kind == "tool" and tool.key == aware.entries[0]["key"]
        assert tool.key.startswith(f"{out['id']}:2:charge:")
        effect = app.effect(tool.key)
        assert effect is not None and effect.status == "completed"
        assert tether.decode(effect.result or "null") == {"charge_id": 1}


@pytest.mark.parametrize("point", ["before_intent", "after_completion"])
def test_unaware_service_without_doubt_runs_once(
    tmp_path: Path, unaware: Ledger, point: str
) -> None:
    out = _crash_then_resume(str(tmp_path / "pay.db"), unaware, "ask", point)
    assert out["status"] == "completed" and len(unaware.entries) == 1


@pytest.mark.parametrize("point", ["after_intent", "after_effect"])
def test_unaware_service_in_doubt_asks_instead_of_guessing(
    tmp_path: Path, unaware: Ledger, point: str
) -> None:
    db = str(tmp_path / "pay.db")
    out = _crash_then_resume(db, unaware, "ask", point)
    assert out["status"] == "waiting"
    assert out["waiting"]["kind"] == "doubt" and out["waiting"]["name"] == "charge"
    happened = point == "after_effect"
    assert len(unaware.entries) == (1 if happened else 0)  # no second call was made
    with tether.open(db) as app:
        with pytest.raises(tether.InvalidState, match="may or may not have run"):
            app.resume(out["id"])
        if happened:
            app.resolve(out["id"], happened=True, by="ops", result={"charge_id": 1})
        else:
            app.resolve(out["id"], happened=False, by="ops")
    final = _agent(db, unaware.url, "ask", point, "resume", out["id"])
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["output"] == {"charge_id": 1}
    assert len(unaware.entries) == 1
    with tether.open(db) as app:
        types = [e.type for e in app.events(out["id"])]
        assert "tool.in_doubt" in types and "tool.resolved" in types
