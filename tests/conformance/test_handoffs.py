"""Handoffs (issue 31): ``run.handoff`` starts a linked run of another agent that begins
with the task variables and the conversation it was handed, recorded in both logs; the
giver waits for it (or not), a replay starts nothing, secrets stay markers and bad input
is refused before anything is written. On both backends; a giver killed between the
target's creation and its own record: tests/acceptance/test_handoffs_crash.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import tether
from tether.cli.main import main
from tether.engine.children import child_id

pytestmark = pytest.mark.conformance


def drain(app: tether.App) -> tether.WorkerStats:
    stats = app.worker(queues=["default", "desk"], concurrency=1).run(
        until_idle=True, install_signals=False
    )
    assert stats.errors == []
    return stats


class Desk:
    """A triage agent that hands a ticket to billing; what billing saw is kept."""

    def __init__(self, app: tether.App) -> None:
        self.seen: list[dict[str, Any]] = []
        self.calls = {"triage": 0, "billing": 0}

        @app.agent
        def billing(run: tether.Run, note: str) -> str:
            self.calls["billing"] += 1
            h = run.handed
            assert h is not None
            self.seen.append(
                {
                    "vars": dict(run.vars),
                    "by": h.by,
                    "pos": h.pos,
                    "messages": h.messages,
                    "session": run.session.id if run.session else None,
                    "view": run.session.prompt_view() if run.session else None,
                }
            )
            return f"refunded {run.vars['account']} ({note})"

        @app.agent
        def triage(run: tether.Run, question: str, wait: bool = True) -> Any:
            self.calls["triage"] += 1
            run.vars["account"] = "A-17"
            run.vars["plan"] = {"tier": "pro", "seats": 3}
            run.vars["unrelated"] = "not handed"
            run.session.add("user", question)
            return run.handoff(
                billing, "refund", vars=["account", "plan"], conversation=True, wait=wait
            )

        self.billing, self.triage = billing, triage


def test_the_target_starts_with_the_vars_and_the_conversation_handed(app: tether.App) -> None:
    desk = Desk(app)
    chat = app.session("ticket-9", owner="acme")
    chat.add("system", "You are support.")
    rid = app.start_in(chat, desk.triage, "charged twice")
    drain(app)
    target = child_id(rid, 4)  # vars at 1..3, the handoff at 4, its join at 5
    assert app.get(rid).status == "completed"
    assert app.get(rid).output == "refunded A-17 (refund)"  # the giver returns its output
    (seen,) = desk.seen
    assert seen["vars"] == {"account": "A-17", "plan": {"tier": "pro", "seats": 3}}
    assert (seen["by"], seen["pos"], seen["session"]) == (rid, 4, "ticket-9")
    view = [
        {"role": "system", "content": "You are support."},
        {"role": "user", "content": "charged twice"},
    ]
    assert seen["messages"] == view and seen["view"] == view
    # the target is the giver's tenant's, in the giver's conversation
    record = app.store.get_run(target)
    assert record.owner == "acme" and record.session_id == "ticket-9"
    assert chat.runs() == [rid, target]

    # both logs record it: the giver's handoff step names the target and what it handed…
    giver = app.get(rid)
    step = next(s for s in giver.steps if s.kind == "handoff")
    assert (step.position, step.name) == (4, "billing")
    assert step.output == {
        "run": target,
        "agent": "billing",
        "vars": ["account", "plan"],
        "session": "ticket-9",
        "upto": 2,
    }
    # …the target's first event names the giver, its position and the values
    first = app.events(target)[0]
    assert first.type == "run.created"
    handoff = first.payload()["handoff"]
    assert handoff == {
        "from": rid,
        "pos": 4,
        "vars": {"account": "A-17", "plan": {"tier": "pro", "seats": 3}},
        "session": "ticket-9",
        "upto": 2,
    }
    got = app.get(target)
    assert got.caller == {"run": rid, "pos": 4} and got.handed == handoff
    assert got.vars == {"account": "A-17", "plan": {"tier": "pro", "seats": 3}}


def test_without_wait_the_giver_goes_on_and_returns_the_targets_id(app: tether.App) -> None:
    desk = Desk(app)
    chat = app.session("ticket-10")
    rid = app.start_in(chat, desk.triage, "hello", False)
    drain(app)
    target = child_id(rid, 4)
    assert app.get(rid).output == target
    assert [s.kind for s in app.get(rid).steps] == ["var", "var", "var", "handoff"]
    assert app.get(target).status == "completed" and desk.calls["billing"] == 1


def test_a_list_of_messages_is_handed_as_a_copy(app: tether.App) -> None:
    got: list[Any] = []

    @app.agent
    def expert(run: tether.Run) -> int:
        assert run.handed is not None and run.session is None
        got.append(run.handed.messages)
        return len(run.handed.messages)

    @app.agent
    def front(run: tether.Run) -> Any:
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes?"}]
        return run.handoff("expert", conversation=history)

    handle = app.run(front)
    assert handle.status == "waiting"
    drain(app)
    assert app.resume(handle.id).output == 2
    assert got == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes?"}]]
    assert app.get(handle.id).steps[0].output["messages"] == 2


def test_a_replay_of_the_giver_starts_nothing(app: tether.App) -> None:
    desk = Desk(app)
    rid = app.start_in(app.session("ticket-11"), desk.triage, "again")
    app.worker(queues=["default"], concurrency=1).run(until_idle=True, install_signals=False)
    # the giver executed twice (waited, then woken: replayed up to the join), its target once
    assert desk.calls == {"triage": 2, "billing": 1}
    target = child_id(rid, 4)
    runs = sorted(r.id for r in app.runs())
    # a fork at the end replays the whole giver from its log: nothing is started
    fork = app.fork(rid, step=5, when="after")
    assert app.resume(fork).output == "refunded A-17 (refund)"
    assert sorted(r.id for r in app.runs()) == sorted([*runs, fork])
    assert desk.calls == {"triage": 3, "billing": 1}
    assert [e.type for e in app.events(target)].count("run.created") == 1


def test_a_giver_resumed_before_its_target_ends_finds_it(app: tether.App) -> None:
    desk = Desk(app)
    rid = app.start_in(app.session("ticket-12"), desk.triage, "wait", queue="desk")
    desks = app.worker(queues=["desk"], concurrency=1)  # the giver alone
    assert desks.run(until_idle=True, install_signals=False).waiting == 1
    target = child_id(rid, 4)
    assert app.store.get_run(rid).waiting_for == f"child:{target}"
    app.store.wake(rid, f"child:{target}", now=app.clock.now())  # spurious
    assert app.resume(rid).status == "waiting"  # re-checked: still queued
    assert [r.id for r in app.runs() if r.agent == "billing"] == [target]
    drain(app)
    assert app.get(rid).output == "refunded A-17 (refund)" and desk.calls["billing"] == 1


def test_secrets_are_handed_as_markers_and_credentials_redacted(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDOFF_TOKEN", "env-token-5521")
    seen: list[Any] = []

    @app.agent
    def payer(run: tether.Run) -> str:
        seen.append((run.vars["card"], run.vars["token"], run.handed.messages))  # type: ignore[union-attr]
        with pytest.raises(tether.InvalidState):
            run.vars["card"].reveal()
        return bool(run.vars["token"].reveal() == "env-token-5521")

    @app.agent
    def cashier(run: tether.Run) -> Any:
        run.vars["card"] = tether.Secret("4111-card-secret-88", name="card")
        run.vars["token"] = tether.Secret.env("HANDOFF_TOKEN", name="token")
        said = [{"role": "user", "content": "my key is sk-proj-Hq3xT9Vw2mLp8RzK4nBc"}]
        return run.handoff(payer, vars=["card", "token"], conversation=said)

    rid = app.start(cashier)
    drain(app)
    target = child_id(rid, 3)
    stored = "".join(e.data for r in (rid, target) for e in app.events(r))
    for clear in ("4111-card-secret-88", "env-token-5521", "Hq3xT9Vw2mLp8RzK4nBc"):
        assert clear not in stored
    assert app.get(rid).output is True  # a Secret.env reveals in the target
    assert seen[0][2] == [{"role": "user", "content": "my key is [redacted:openai-key]"}]


def test_bad_input_is_refused_and_starts_nothing(app: tether.App) -> None:
    @app.agent
    def other(run: tether.Run) -> None:
        return None

    cases: dict[str, Any] = {
        "unknown": lambda run: run.handoff("nobody"),
        "unset": lambda run: run.handoff(other, vars=["missing"]),
        "no session": lambda run: run.handoff(other, conversation=True),
        "bad conversation": lambda run: run.handoff(other, conversation="hi"),
        "bad name": lambda run: run.handoff(other, vars=[3]),
        "not names": lambda run: run.handoff(other, vars=5),  # was TypeError: not iterable
        "values": lambda run: run.handoff(other, vars={"x": 1}),  # names, not values
    }

    @app.agent
    def giver(run: tether.Run, case: str) -> Any:
        return cases[case](run)

    expected = {
        "unknown": (tether.NotFound, "no agent named 'nobody'"),
        "unset": (tether.InvalidInput, "task variable 'missing' is not set"),
        "no session": (tether.InvalidInput, "belongs to none"),
        "bad conversation": (tether.InvalidInput, "conversation= takes True"),
        "bad name": (tether.InvalidInput, "vars= takes task variable names"),
        "not names": (
            tether.InvalidInput,
            "vars= takes task variable names (non-empty str), not 5",
        ),
        "values": (tether.InvalidInput, "not {'x': 1}"),
    }
    for case, (error, words) in expected.items():
        with pytest.raises(tether.RunFailed) as failed:
            app.run(giver, case)
        assert f"{error.__name__}: " in str(failed.value) and words in str(failed.value), case
    assert [r.agent for r in app.runs() if r.agent == "other"] == []


def test_a_value_that_cannot_be_stored_is_named(app: tether.App) -> None:
    @app.agent
    def other(run: tether.Run) -> None:
        return None

    @app.agent
    def giver(run: tether.Run) -> Any:
        run.vars._data["lock"] = {"it": object()}  # as if set outside the journal
        return run.handoff(other, vars="lock")

    with pytest.raises(tether.RunFailed) as failed:
        app.run(giver)
    assert "EncodeError: " in str(failed.value)
    assert "task variable 'lock' cannot be handed (stored): builtins.object at $.it" in str(
        failed.value
    )
    assert [r.agent for r in app.runs() if r.agent == "other"] == []


def test_another_tenants_session_is_refused(app: tether.App) -> None:
    @app.agent
    def other(run: tether.Run) -> None:
        return None

    theirs = app.session("theirs", owner="globex")

    @app.agent
    def giver(run: tether.Run) -> Any:
        return run.handoff(other, conversation=theirs)

    rid = app.for_tenant("acme").start(giver)
    drain(app)
    error = app.get(rid).failure
    assert error is not None and "belongs to owner 'globex'" in error["message"]
    assert [r.agent for r in app.runs() if r.agent == "other"] == []


def test_a_failed_target_reaches_the_giver_as_child_failed(app: tether.App) -> None:
    @app.agent
    def flaky(run: tether.Run) -> None:
        raise RuntimeError("no refunds today")

    @app.agent
    def giver(run: tether.Run) -> Any:
        try:
            return run.handoff(flaky)
        except tether.ChildFailed as e:
            return {"failed": e.child_id, "message": e.error.get("message")}

    rid = app.start(giver)
    drain(app)
    assert app.get(rid).output == {"failed": child_id(rid, 1), "message": "no refunds today"}


def test_async_agents_hand_off(app: tether.App) -> None:
    @app.agent
    async def helper(run: tether.AsyncRun) -> Any:
        assert run.handed is not None
        return run.vars["n"] * 2

    @app.agent
    async def asker(run: tether.AsyncRun) -> Any:
        run.vars["n"] = 21
        await asyncio.sleep(0)
        return await run.handoff(helper, vars=["n"])

    rid = app.start(asker)
    drain(app)
    assert app.get(rid).output == 42
    assert app.get(child_id(rid, 2)).handed == {"from": rid, "pos": 2, "vars": {"n": 21}}


def test_cancelling_a_waiting_giver_cancels_its_target(app: tether.App) -> None:
    desk = Desk(app)
    rid = app.start_in(app.session("ticket-13"), desk.triage, "cancel me", queue="desk")
    desks = app.worker(queues=["desk"], concurrency=1)  # the giver alone
    assert desks.run(until_idle=True, install_signals=False).waiting == 1
    app.cancel(rid, reason="not needed")
    assert app.store.get_run(child_id(rid, 4)).status == "cancelled"
    assert app.store.get_run(rid).status == "cancelled"


def test_show_prints_the_handoff_in_both_runs_and_the_tree_links_them(
    app: tether.App, backend: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    desk = Desk(app)
    rid = app.start_in(app.session("ticket-14"), desk.triage, "show me")
    drain(app)
    target = child_id(rid, 4)
    assert main(["--db", backend.url, "show", rid]) == 0
    out = capsys.readouterr().out
    assert (
        f"handoff    to {target} (billing) at position 4: vars account, plan, "
        f"session ticket-14 up to message 1"
    ) in out
    assert main(["--db", backend.url, "show", target]) == 0
    out = capsys.readouterr().out
    assert f"handed     from {rid} at position 4: vars account, plan" in out
    assert main(["--db", backend.url, "show", target, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["handed"]["from"] == rid and shown["handoffs"] == []
    assert main(["--db", backend.url, "show", rid, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [h["run"] for h in shown["handoffs"]] == [target]
    assert main(["--db", backend.url, "history", target]) == 0
    assert f"agent billing, handed by {rid} at 4, input" in capsys.readouterr().out
    assert main(["--db", backend.url, "runs", "--tree"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == rid and lines[2].startswith(f"└ {target}")


def test_the_target_belongs_to_the_givers_tenant(app: tether.App) -> None:
    @app.agent
    def helper(run: tether.Run) -> Any:
        return run.tenant

    @app.agent
    def giver(run: tether.Run) -> Any:
        return run.handoff(helper, conversation=[{"role": "user", "content": "hi"}])

    rid = app.for_tenant("acme").start(giver)
    drain(app)
    assert app.store.get_run(child_id(rid, 1)).owner == "acme"
    assert app.get(rid).output == "acme"


def test_a_replay_of_a_giver_returns_its_target_and_starts_none(app: tether.App) -> None:
    from tether.testing import replay

    desk = Desk(app)
    chat = app.session("ticket-11", owner="acme")
    rid = app.start_in(chat, desk.triage, "charged twice")
    drain(app)
    before = len(app.runs(limit=100))
    report = replay(app, rid)
    assert (report.outcome, report.output) == ("finished", "refunded A-17 (refund)")
    assert len(app.runs(limit=100)) == before and desk.calls["billing"] == 1
