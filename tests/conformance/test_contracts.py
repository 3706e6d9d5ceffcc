"""Contracts on tools, on both stores: bad arguments never reach a tool (it counts its calls
in a file), a refusal and an escalation are recorded and replayed (never judged again),
a result that breaks its shape fails the step after its effect, and garbage (a rule that
raises, an argument that is not data, a rule naming no tool) gets a clear error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance
PROPOSED, VERDICT = "tool.proposed", "tool.verdict"


class Kit:
    """An App with tools that count the calls reaching them in a file."""

    def __init__(
        self, backend: Backend, path: Path, *rules: tether.Rule, limit: int = 500, **policy: Any
    ) -> None:
        self.path = path
        self.app = tether.open(backend.url, policy=tether.Policy(rules=list(rules), **policy))
        most = tether.Rule(lambda v: v <= limit, name="max-amount", arg="amount", version="1")

        @self.app.tool(risk="write", contract=[most])
        def pay(to: str, amount: int, currency: Literal["EUR", "USD"] = "EUR") -> dict[str, Any]:
            self.add(f"pay {to} {amount} {currency}")
            return {"paid": amount}

        @self.app.tool(risk="write", contract=True)
        def book(room: str) -> dict[str, Any]:
            self.add(f"book {room}")
            return "booked"  # type: ignore[return-value]  # breaks its shape on purpose

        @self.app.tool(risk="read")
        def plain(x: Any) -> Any:
            self.add("plain")
            return x

        self.pay, self.book, self.plain = pay, book, plain

    def __enter__(self) -> Kit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.close()

    def add(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line + "\n")

    def calls(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def agent(self, body: Callable[[tether.Run], Any], name: str = "a") -> Any:
        return self.app.agent(name=name)(body)

    def types(self, run_id: str) -> list[str]:
        return [e.type for e in self.app.events(run_id)]

    def failed(self, body: Callable[[tether.Run], Any]) -> tuple[str, dict[str, Any]]:
        with pytest.raises(tether.RunFailed) as e:
            self.app.run(self.agent(body))
        return e.value.run_id, dict(e.value.error)


@pytest.fixture
def kit(backend: Backend, tmp_path: Path) -> Iterator[Kit]:
    with Kit(backend, tmp_path / "calls.txt") as k:
        yield k


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"to": "bob", "amount": "120"}, "amount: expected int, got str '120'"),
        ({"to": "bob", "amount": True}, "amount: expected int, got bool True"),
        ({"to": "bob", "amount": 900}, "rule 'max-amount' v1 judging amount=900 was breached"),
        ({"to": "bob", "amount": 1, "currency": "GBP"}, "currency: expected one of 'EUR', 'USD'"),
        ({"to": "bob"}, "arguments: missing a required argument: 'amount'"),
        ({"to": "bob", "amount": 1, "memo": "x"}, "got an unexpected keyword argument 'memo'"),
        ({"to": "bob", "amount": object()}, "not data (builtins.object)"),
    ],
)
def test_bad_arguments_never_reach_the_tool(kit: Kit, kwargs: dict[str, Any], words: str) -> None:
    run_id, error = kit.failed(lambda run: run.tool(kit.pay, **kwargs))
    assert kit.calls() == []
    assert error["type"] == "tether.errors.ContractViolation"
    assert words in error["message"] and "The tool was not called" in error["message"]
    assert (error["step"], error["position"]) == ("pay", 1)
    assert kit.types(run_id)[-3:] == [PROPOSED, VERDICT, "run.failed"]
    step = kit.app.get(run_id).step(1)
    assert step is not None and step.status == "failed"
    assert step.detail is not None and step.detail["contract"]["args"]["verdict"] == "refuse"


def test_an_allowed_call_is_three_records_and_costs_no_extra_commit(kit: Kit) -> None:
    handle = kit.app.run(kit.agent(lambda run: run.tool(kit.pay, "bob", 120)))
    assert handle.output == {"paid": 120} and kit.calls() == ["pay bob 120 EUR"]
    events = kit.app.events(handle.id)
    assert [e.type for e in events][2:] == [
        PROPOSED,
        VERDICT,
        "tool.intent",
        "step.completed",
        "run.completed",
    ]
    by_type = {e.type: e for e in events}
    assert by_type[PROPOSED].payload()["input"] == {"args": ["bob", 120], "kwargs": {}}
    rules = by_type[VERDICT].payload()["rules"]
    assert rules == [
        {"rule": "max-amount", "on_breach": "refuse", "arg": "amount", "version": "1"}
        | {"outcome": "pass"}
    ]
    # the proposal and verdict rode with the intent: one transaction, consecutive seqs
    assert by_type["tool.intent"].seq == by_type[VERDICT].seq + 1


def test_a_plain_tool_records_no_proposal(kit: Kit) -> None:
    handle = kit.app.run(kit.agent(lambda run: run.tool(kit.plain, 3)))
    assert handle.output == 3
    assert PROPOSED not in kit.types(handle.id) and VERDICT not in kit.types(handle.id)


def test_a_refusal_caught_by_the_agent_replays_as_recorded(
    backend: Backend, tmp_path: Path
) -> None:
    def body(k: Kit) -> Callable[[tether.Run], Any]:
        def agent(run: tether.Run) -> Any:
            try:
                run.tool(k.pay, "bob", 900)
            except tether.ContractViolation as e:
                note = f"{e.rule}:{e.value}:{e.stage}:{e.position}"
                run.step("note", lambda: note)
            run.approve("go-on")
            return run.tool(k.pay, "bob", 100)

        return agent

    k = Kit(backend, tmp_path / "calls.txt")
    handle = k.app.run(k.agent(body(k)))
    assert handle.status == "waiting" and k.calls() == []
    k.app.approve(handle.id, "go-on", by="alice")
    k.app.close()
    # another App (a process with other code) whose rule allows 900 resumes it: the
    # recorded refusal stands, and the agent takes the same path again
    other = Kit(backend, tmp_path / "calls.txt", limit=1000)
    other.agent(body(other))
    try:
        done = other.app.resume(handle.id)
        assert done.output == {"paid": 100} and other.calls() == ["pay bob 100 EUR"]
        assert other.app.get(handle.id).step(2).output == "max-amount:900:args:1"  # type: ignore[union-attr]
        assert other.types(handle.id).count(VERDICT) == 2  # nothing judged again
    finally:
        other.app.close()


def test_a_refusal_stands_when_the_code_drops_the_contract(
    backend: Backend, tmp_path: Path
) -> None:
    k = Kit(backend, tmp_path / "calls.txt")
    run_id, _ = k.failed(lambda run: run.tool(k.pay, "bob", 900))
    k.app.close()
    bare = tether.open(backend.url)
    try:

        @bare.tool(risk="write", name="pay")  # the same tool, with no contract any more
        def pay(to: str, amount: int, currency: str = "EUR") -> dict[str, Any]:
            k.add(f"pay {to} {amount}")
            return {"paid": amount}

        bare.agent(name="a")(lambda run: run.tool(pay, "bob", 900))
        with pytest.raises(tether.RunFailed, match="rule 'max-amount' v1 judging amount=900"):
            bare.retry_run(run_id)
        assert k.calls() == []
    finally:
        bare.close()


def test_a_rule_that_raises_or_answers_no_bool_refuses(backend: Backend, tmp_path: Path) -> None:
    broken = tether.Rule(lambda a: a["amount"] / 0 > 1, name="broken", tool="pay")
    vague = tether.Rule(lambda a: None, name="vague", tool="book")  # type: ignore[arg-type,return-value]
    with Kit(backend, tmp_path / "calls.txt", broken, vague) as k:
        _, error = k.failed(lambda run: run.tool(k.pay, "bob", 1))
        assert "rule 'broken' failed (ZeroDivisionError: division by zero)" in error["message"]
        assert "a rule that fails refuses the call: fix the rule" in error["message"]
        _, error = k.failed(lambda run: run.tool(k.book, "r1"))
        assert "rule 'vague' failed (answered None, not True or False)" in error["message"]
        assert k.calls() == []


def test_a_result_that_breaks_its_shape_fails_after_its_effect(kit: Kit) -> None:
    run_id, error = kit.failed(lambda run: run.tool(kit.book, "r1"))
    assert kit.calls() == ["book r1"]
    assert "result: expected dict[str, Any], got str 'booked'" in error["message"]
    assert "The call happened: its effect is recorded as completed" in error["message"]
    assert kit.types(run_id)[-4:] == ["tool.intent", "step.completed", VERDICT, "run.failed"]
    step = kit.app.get(run_id).step(1)
    assert step is not None and step.status == "completed" and step.output == "booked"
    assert f"recorded as completed (key {step.key})" in error["message"]  # the call's own
    effect = kit.app.store.get_effect(step.key or "")
    assert effect is not None and effect.status == "completed"
    # a retry replays the recorded refusal: the effect is not made again
    with pytest.raises(tether.RunFailed, match="breaks its declared shape"):
        kit.app.retry_run(run_id)
    assert kit.calls() == ["book r1"]


def test_escalation_approved_goes_on_and_denied_refuses(backend: Backend, tmp_path: Path) -> None:
    domain = tether.Rule(
        lambda to: to.endswith("@example.com"),
        name="to-domain",
        tool="pay",
        arg="to",
        on_breach="escalate",
    )
    with Kit(backend, tmp_path / "calls.txt", domain, approvers=["alice"]) as k:
        agent = k.agent(lambda run: run.tool(k.pay, "eve@evil.org", 10))
        first, second = k.app.run(agent), k.app.run(agent)
        assert first.status == second.status == "waiting" and k.calls() == []
        request = k.app.get(first.id).waiting
        assert request is not None and request["name"] == "approve:pay"
        assert request["payload"]["contract"]["rules"][0]["value"] == "eve@evil.org"
        k.app.approve(first.id, "approve:pay", by="alice")
        assert k.app.resume(first.id).output == {"paid": 10}
        k.app.deny(second.id, "approve:pay", by="alice", reason="no")
        with pytest.raises(tether.RunFailed, match="its approval was refused by alice: no"):
            k.app.resume(second.id)
        assert k.calls() == ["pay eve@evil.org 10 EUR"]
        step = k.app.get(second.id).step(2)
        assert step is not None and step.status == "failed"


def test_a_denied_escalation_caught_keeps_later_positions(backend: Backend, tmp_path: Path) -> None:
    domain = tether.Rule(lambda a: False, name="always", tool="pay", on_breach="escalate")
    with Kit(backend, tmp_path / "calls.txt", domain) as k:

        def body(run: tether.Run) -> Any:
            try:
                run.tool(k.pay, "bob", 1)
            except tether.ContractViolation as e:
                assert (e.stage, e.rule, e.position) == ("approval", "always", 2)
            return run.step("after", lambda: "went on")

        handle = k.app.run(k.agent(body))
        k.app.deny(handle.id, "approve:pay", by="carol")
        assert k.app.resume(handle.id).output == "went on"
        assert k.calls() == []


def test_an_async_agent_is_judged_too(kit: Kit) -> None:
    @kit.app.agent(name="async_a")
    async def body(run: tether.AsyncRun) -> Any:
        return await run.tool(kit.pay, "bob", "5")

    with pytest.raises(tether.RunFailed, match="amount: expected int"):
        asyncio.run(kit.app.arun(body))
    assert kit.calls() == []


def test_a_rule_naming_no_tool_of_the_app_is_refused(backend: Backend, tmp_path: Path) -> None:
    typo = tether.Rule(lambda a: True, name="to-domain", tool="send_emial")
    with Kit(backend, tmp_path / "calls.txt", typo) as k:
        agent = k.agent(lambda run: run.tool(k.pay, "bob", 1))
        with pytest.raises(tether.InvalidInput, match="names tool 'send_emial', which this app"):
            k.app.run(agent)
        with pytest.raises(tether.InvalidInput, match="its tools: book, pay, plain"):
            k.app.start(agent)
        assert k.app.runs() == [] and k.calls() == []  # no run was made
        with pytest.raises(tether.InvalidInput, match="send_emial"):
            k.app.worker()
        with pytest.raises(tether.InvalidInput, match="send_emial"):
            k.app.policy = tether.Policy(rules=[typo])


def test_a_judged_run_exports_and_imports_whole(kit: Kit) -> None:
    import io

    run_id, _ = kit.failed(lambda run: run.tool(kit.pay, "bob", 900))
    out = io.StringIO()
    kit.app.export_run(run_id, out)
    copy = kit.app.import_run(out.getvalue().splitlines(), new_id=True)
    original, imported = kit.app.get(run_id), kit.app.get(copy)
    assert imported.step(1) is not None and original.step(1) is not None
    assert imported.step(1).detail == original.step(1).detail  # type: ignore[union-attr]
    assert kit.types(copy) == kit.types(run_id)


def test_a_secret_argument_is_judged_but_never_recorded(backend: Backend, tmp_path: Path) -> None:
    with Kit(backend, tmp_path / "calls.txt") as k:
        short = tether.Rule(lambda key: len(key) > 20, name="long-key", arg="api_key")

        @k.app.tool(risk="write", secret=["api_key"], contract=[short])
        def call_api(api_key: str, q: str) -> str:
            k.add("call_api")
            return q

        run_id, error = k.failed(lambda run: run.tool(call_api, "sk-live-short", "x"))
        assert "api_key='***'" in error["message"] and k.calls() == []
        logged = " ".join(e.data for e in k.app.events(run_id))
        assert "sk-live-short" not in logged
        handle = k.app.run(k.agent(lambda run: run.tool(call_api, "sk-" + "x" * 30, "q"), "b"))
        assert handle.output == "q" and k.calls() == ["call_api"]


def test_the_policy_gate_of_a_judged_tool_stays_the_policy_s(
    backend: Backend, tmp_path: Path
) -> None:
    with Kit(backend, tmp_path / "calls.txt", approve_at="write") as k:

        def body(run: tether.Run) -> Any:
            try:
                return run.tool(k.pay, "bob", 1)
            except tether.ApprovalDenied as e:  # no rule asked: the policy's own denial
                by = e.by
                return run.step("denied", lambda: f"denied by {by}")

        agent = k.agent(body)
        yes, no = k.app.run(agent), k.app.run(agent)
        request = k.app.get(yes.id).waiting
        assert request is not None and "contract" not in request["payload"]  # nothing fired
        k.app.approve(yes.id, "approve:pay", by="alice")
        k.app.deny(no.id, "approve:pay", by="carol")
        assert k.app.resume(yes.id).output == {"paid": 1}
        assert k.app.resume(no.id).output == "denied by carol"
        assert k.app.resume(no.id).output == "denied by carol"  # finished: as recorded
        assert k.calls() == ["pay bob 1 EUR"]
        bad = k.failed(lambda run: run.tool(k.pay, "bob", 900))[1]  # refused before asking
        assert "max-amount" in bad["message"] and k.calls() == ["pay bob 1 EUR"]


def test_judged_calls_fan_out_but_an_escalation_cannot(backend: Backend, tmp_path: Path) -> None:
    always = tether.Rule(lambda a: False, name="ask", tool="book", on_breach="escalate")
    with Kit(backend, tmp_path / "calls.txt", always) as k:
        two = k.agent(
            lambda run: run.parallel(
                lambda: run.tool(k.pay, "a", 1), lambda: run.tool(k.pay, "b", 2)
            ),
            "two",
        )
        handle = k.app.run(two)
        assert handle.output == [{"paid": 1}, {"paid": 2}]
        assert sorted(k.calls()) == ["pay a 1 EUR", "pay b 2 EUR"]
        assert k.types(handle.id).count(PROPOSED) == 2
        gated = k.agent(lambda run: run.parallel(lambda: run.tool(k.book, "r1")), "gated")
        with pytest.raises(tether.RunFailed, match="needs an approval, which takes a position"):
            k.app.run(gated)
        assert "book r1" not in k.calls()
