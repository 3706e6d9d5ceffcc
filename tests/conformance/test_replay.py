"""Dry replay (tether.testing.replay): an agent's current code against a recorded run,
executing nothing and writing nothing. On both backends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.errors import InvalidInput
from tether.testing import replay

pytestmark = pytest.mark.conformance


class Support:
    """A support agent: a model classifies the ticket, a refund tool is called for a
    refund, then it waits for the customer's ack. ``version`` changes its code; every
    call of the model, a step or the tool is counted (a replay calls none)."""

    def __init__(self, app: tether.App) -> None:
        self.app = app
        self.version = 1
        self.calls: list[str] = []

        @app.tool(risk="write")
        def refund(amount: int, *, idempotency_key: str) -> str:
            self.calls.append("refund")
            return f"refunded {amount}"

        def classify(ticket: str) -> dict[str, Any]:
            self.calls.append("model")
            return {"label": "refund" if "broken" in ticket else "question", "amount": 5}

        @app.agent
        def support(run: tether.Run, ticket: str) -> str:
            if self.version == 2:  # a step inserted before the recorded ones
                run.step("triage", lambda: self.calls.append("triage"))
            verdict = run.llm("classify", classify, ticket)
            if verdict["label"] != "refund":
                return "answered"
            amount = verdict["amount"] * (2 if self.version == 3 else 1)  # other tool args
            receipt = run.tool(refund, amount)
            run.wait("ack")
            return receipt

        self.agent = support


@pytest.fixture
def shop(app: tether.App) -> Support:
    return Support(app)


def test_a_waiting_run_would_continue_at_its_wait(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "broken kettle").id
    shop.calls.clear()
    report = replay(shop.app, rid)
    assert (report.outcome, report.position, report.ok) == ("continues", 3, True)
    assert str(report.found) == "wait ack" and report.recorded is not None
    assert report.replayed == 2 and report.status == "waiting"
    assert shop.calls == []  # neither the model nor the tool ran


def test_a_step_inserted_diverges_with_the_recorded_and_the_found_step(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "broken kettle").id
    shop.version = 2
    report = replay(shop.app, rid)
    assert (report.outcome, report.position, report.ok) == ("diverges", 1, False)
    assert report.recorded == tether.testing.StepRef("llm", "classify", None)
    assert report.found == tether.testing.StepRef("step", "triage", None)
    assert dict(report.differs) == {"kind": ("llm", "step"), "name": ("classify", "triage")}
    # exactly what a real resume finds: the run is blocked at the same position
    with pytest.raises(tether.NondeterminismError) as blocked:
        shop.app.signal(rid, "ack")
        shop.app.resume(rid)
    assert blocked.value.position == report.position
    assert shop.calls == ["model", "refund"]  # the first execution's; the resume ran none


def test_a_tool_called_with_other_arguments_diverges_on_its_args(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "broken kettle").id
    shop.version = 3
    report = replay(shop.app, rid)
    assert (report.outcome, report.position) == ("diverges", 2)
    assert set(report.differs) == {"args"}
    recorded, found = report.differs["args"]
    assert recorded != found and report.recorded is not None
    assert report.recorded.digest == recorded and report.found is not None
    assert report.found.digest == found


def test_a_finished_run_would_finish_with_its_output(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "how do I descale?").id
    shop.calls.clear()
    report = replay(shop.app, rid)
    assert (report.outcome, report.output, report.position) == ("finished", "answered", None)
    assert report.unreached == () and shop.calls == []


def test_steps_the_new_code_no_longer_makes_are_reported_unreached(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "broken kettle").id
    shop.app.signal(rid, "ack")
    assert shop.app.resume(rid).status == "completed"

    @shop.app.agent(name="support")
    def shorter(run: tether.Run, ticket: str) -> str:
        return run.llm("classify", lambda t: {}, ticket)["label"]

    report = replay(shop.app, rid)
    assert (report.outcome, report.output, report.unreached) == ("finished", "refund", (2, 3))


def test_what_if_another_model_output_takes_the_other_path(shop: Support) -> None:
    rid = shop.app.run(shop.agent, "how do I descale?").id
    shop.calls.clear()
    refund = {"label": "refund", "amount": 7}
    # the tool has no record: the replay stops there, where a resume would call it
    report = replay(shop.app, rid, replace={1: refund})
    assert (report.outcome, report.position) == ("continues", 2)
    assert str(report.found).startswith("tool refund(args ") and report.recorded is None
    # given the tool's result and the signal too, the agent finishes on that path
    report = replay(shop.app, rid, replace={1: refund, 2: "refunded 7", 3: None})
    assert (report.outcome, report.output) == ("finished", "refunded 7")
    # a malformed model output: the agent's own handling fails, as a resume would
    report = replay(shop.app, rid, replace={1: {"lable": "refund"}})
    assert report.outcome == "fails" and report.error is not None
    assert report.error["type"] == "KeyError" and not report.ok
    assert shop.calls == []


def test_an_agent_that_catches_exceptions_still_stops_where_the_log_ends(
    app: tether.App,
) -> None:
    second = {"name": "new"}  # the second step's name: changed after the run

    @app.agent
    def careful(run: tether.Run) -> str:
        run.step("one", lambda: 1)
        try:
            run.step(second["name"], lambda: 2)
        except Exception:  # would swallow NondeterminismError: a resume blocks all the same
            return "swallowed"
        return "done"

    rid = app.run(careful).id
    second["name"] = "other"
    report = replay(app, rid)
    assert (report.outcome, report.position, str(report.found)) == ("diverges", 2, "step other")


def test_an_async_agent_replays_too(app: tether.App) -> None:
    @app.agent
    async def summarise(run: tether.AsyncRun, text: str) -> str:
        a, b = await asyncio.gather(run.step("a", str.upper, text), run.step("b", len, text))
        await run.wait("go")
        return f"{a}{b}"

    rid = app.run(summarise, "hi").id
    report = replay(app, rid)
    assert (report.outcome, report.position, report.replayed) == ("continues", 3, 2)
    report = replay(app, rid, replace={3: None})
    assert (report.outcome, report.output) == ("finished", "HI2"), report.error


def test_an_export_file_replays_without_the_database_or_an_app(
    shop: Support, tmp_path: Path
) -> None:
    rid = shop.app.run(shop.agent, "broken kettle").id
    path = tmp_path / "run.jsonl"
    with path.open("w") as f:
        shop.app.export_run(rid, f)
    by_agent = replay(shop.agent, path)  # the function alone: no App, no database
    by_app = replay(shop.app, str(path))
    assert by_agent.outcome == by_app.outcome == "continues" and by_agent.run_id == rid
    shop.version = 2
    assert replay(shop.agent, path).outcome == "diverges"
    with pytest.raises(InvalidInput, match="needs the App"):
        replay(shop.agent, rid)
    with pytest.raises(InvalidInput, match="positions are integers"):
        replay(shop.app, rid, replace={0: 1})


def _counts(backend: Backend) -> dict[str, int]:
    if backend.name == "sqlite":
        names = [r[0] for r in backend.sql("SELECT name FROM sqlite_master WHERE type='table'")]
    else:
        names = [
            r[0]
            for r in backend.sql(
                f"SELECT tablename FROM pg_tables WHERE schemaname = '{backend.schema}'"
            )
        ]
    return {n: backend.sql(f'SELECT count(*) FROM "{n}"')[0][0] for n in names}


def test_replay_writes_nothing(backend: Backend, shop: Support) -> None:
    waiting = shop.app.run(shop.agent, "broken kettle").id
    done = shop.app.run(shop.agent, "a question").id
    before = _counts(backend)
    version = _data_version(backend)
    for v in (1, 2, 3):
        shop.version = v
        for rid in (waiting, done):
            replay(shop.app, rid)
            replay(shop.app, rid, replace={1: {"label": "refund", "amount": 1}})
    assert _counts(backend) == before and before["events"] > 0
    assert _data_version(backend) == version


def _data_version(backend: Backend) -> int | None:
    """SQLite's count of commits by other connections, seen from one connection kept open
    (None on PostgreSQL, where the row counts say it)."""
    if backend.name != "sqlite":
        return None
    import sqlite3

    conn = _KEPT.setdefault(backend.url, sqlite3.connect(backend.url))
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


_KEPT: dict[str, Any] = {}


def test_a_fan_out_replays_from_its_branches_records(app: tether.App) -> None:
    size = {"n": 3}

    @app.agent
    def scatter(run: tether.Run) -> list[int]:
        squares = run.map("square", lambda x: x * x, range(size["n"]))
        run.wait("go")
        return squares

    rid = app.run(scatter).id
    report = replay(app, rid, replace={4: None})
    assert (report.outcome, report.output, report.replayed) == ("finished", [0, 1, 4], 4)
    size["n"] = 4  # a fourth branch takes the position the wait recorded: a resume blocks
    report = replay(app, rid)
    assert (report.outcome, report.position) == ("diverges", 4)
    assert (str(report.recorded), str(report.found)) == ("wait go", "step square[3]")


def test_a_run_being_compensated_would_finish_its_compensation(app: tether.App) -> None:
    from tether.model import events as ev

    @app.agent
    def doomed(run: tether.Run) -> None:
        run.step("one", lambda: 1)
        run.wait("never")

    rid = app.run(doomed).id
    state = app.get(rid)
    assert state.compensating is None
    # what compensation.start records, as a crash in the middle of a compensation leaves it
    now = app.clock.now()
    lease = app.store.claim(rid, owner=app.owner, ttl=30, now=now)
    data = {"reason": "cancelled", "error": {}, "from_position": 2}
    start = ev.new(ev.RUN_COMPENSATING, data, now)
    app.store.append(rid, [start], expected_seq=state.seq, epoch=lease.epoch, now=now)
    assert app.get(rid).compensating is not None
    report = replay(app, rid)
    assert (report.outcome, report.position, report.ok) == ("continues", None, True)
    assert "compensation" in str(report)
