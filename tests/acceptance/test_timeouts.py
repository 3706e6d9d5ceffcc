"""A write tool that hangs past its timeout leaves its effect in doubt: with default settings
it is never sent again blindly (the invite sent three times), and a tool that dedups is not
called again while its abandoned attempt still runs in this process.

The service is the real HTTP ledger on 127.0.0.1, holding its answers after it performed
the effect (a slow API). Timeouts are 2 s: long enough for a released answer to arrive
on a loaded machine, short enough to keep the tests quick.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ledger import Ledger

import tether

pytestmark = pytest.mark.acceptance
TIMEOUT = 2.0


def _post(url: str, key: str | None = None) -> Any:
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    req = urllib.request.Request(
        url + "/invite", data=json.dumps({"amount": 1}).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:  # hangs until the ledger answers
        return json.loads(resp.read())


def _onboard(app: tether.App, ledger: Ledger, policy: tether.Retry, *, keyed: bool) -> Any:
    """Run an agent that invites through ``ledger`` with a write tool of default settings,
    with the idempotency key (it dedups, passing it on) or without (nothing can dedup)."""
    if keyed:

        def send_invite(email: str, *, idempotency_key: str) -> Any:
            return _post(ledger.url, idempotency_key)
    else:

        def send_invite(email: str) -> Any:
            return _post(ledger.url)

    tool = app.tool(risk="write", retry=policy)(send_invite)

    @app.agent
    def onboard(run: tether.Run, email: str) -> Any:
        return run.tool(tool, email)

    return app.run(onboard, "ada@example.com")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tether.App]:
    a = tether.open(str(tmp_path / "agent.db"))
    yield a
    a.close()


@pytest.fixture
def hanging() -> Iterator[Ledger]:
    ledger = Ledger(aware=False, hang=True).start()
    yield ledger
    ledger.stop()


@pytest.fixture
def hanging_dedup() -> Iterator[Ledger]:
    ledger = Ledger(aware=True, hang=True).start()
    yield ledger
    ledger.stop()


def test_a_hanging_invite_is_sent_once_and_asks_with_default_settings(
    app: tether.App, hanging: Ledger
) -> None:
    policy = tether.Retry(max_attempts=3, timeout=TIMEOUT, backoff=0)
    handle = _onboard(app, hanging, policy, keyed=False)
    assert handle.status == "waiting", handle
    assert handle.waiting is not None
    assert handle.waiting["kind"] == "doubt" and handle.waiting["reason"] == "timeout"
    assert len(hanging.entries) == 1  # one invite, not three
    step = app.get(handle.id).steps[0]
    assert step.status == "in_doubt" and step.errors[-1]["type"] == "tether.errors.StepTimeout"
    with pytest.raises(tether.InvalidState, match="may or may not have run"):
        app.resume(handle.id)
    app.resolve(handle.id, happened=True, by="ops", result={"charge_id": 1})
    assert app.resume(handle.id).output == {"charge_id": 1}
    assert len(hanging.entries) == 1


def test_a_dedup_tool_waits_for_its_abandoned_attempt_and_takes_its_outcome(
    app: tether.App, hanging_dedup: Ledger
) -> None:
    def first_timeout(exc: BaseException) -> bool:
        hanging_dedup.release()  # the service answers the abandoned call now
        return True

    policy = tether.Retry(max_attempts=3, timeout=TIMEOUT, backoff=0, retry_on=first_timeout)
    handle = _onboard(app, hanging_dedup, policy, keyed=True)
    assert handle.status == "completed" and handle.output == {"charge_id": 1}
    assert hanging_dedup.requests == 1  # the retry took the first call's answer
    step = app.get(handle.id).steps[0]
    assert step.attempts == 2 and [e["type"] for e in step.errors] == ["tether.errors.StepTimeout"]


def test_a_dedup_tool_whose_attempt_still_runs_asks_then_uses_its_outcome(
    app: tether.App, hanging_dedup: Ledger
) -> None:
    policy = tether.Retry(max_attempts=2, timeout=TIMEOUT, backoff=0)
    handle = _onboard(app, hanging_dedup, policy, keyed=True)
    assert handle.status == "waiting" and handle.waiting is not None
    assert handle.waiting["reason"] == "timeout"
    assert hanging_dedup.requests == 1  # the second attempt waited instead of calling
    assert "still runs in this process" in app.get(handle.id).steps[0].errors[-1]["message"]
    hanging_dedup.release()
    app.resolve(handle.id, happened=False, by="ops")  # "call it again": it ends first
    assert app.resume(handle.id).output == {"charge_id": 1}
    assert hanging_dedup.requests == 1


def test_an_async_write_tool_that_times_out_is_in_doubt(app: tether.App) -> None:
    sent: list[str] = []

    @app.tool(risk="write", retry=tether.Retry(max_attempts=3, timeout=0.2, backoff=0))
    async def send_invite(email: str) -> str:
        sent.append(email)
        await asyncio.Event().wait()  # the answer never comes
        return "sent"

    @app.agent
    async def onboard(run: tether.AsyncRun, email: str) -> Any:
        return await run.tool(send_invite, email)

    handle = asyncio.run(app.arun(onboard, "ada@example.com"))
    assert handle.status == "waiting" and sent == ["ada@example.com"]


def test_a_read_tool_that_times_out_is_still_retried(app: tether.App) -> None:
    calls: list[int] = []
    gate = threading.Event()

    @app.tool(risk="read", retry=tether.Retry(max_attempts=2, timeout=0.2, backoff=0))
    def lookup(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            gate.wait(60)  # hangs once; its thread is abandoned
        return n

    @app.agent
    def reader(run: tether.Run) -> Any:
        return run.tool(lookup, 7)

    try:
        assert app.run(reader).output == 7 and calls == [7, 7]
    finally:
        gate.set()
