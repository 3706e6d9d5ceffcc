"""Contracts, without a database: the declared-shape checker, the rules' own checks, and
what a policy or a tool declaration refuses (a clear error before any run exists)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

import tether
from tether.engine.contracts import Contract
from tether.engine.hints import problems

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        (1, int, []),
        (1.5, float, []),
        (2, float, []),  # an int is a float
        (True, int, ["x: expected int, got bool True"]),
        ("1", int, ["x: expected int, got str '1'"]),
        (None, Optional[int], []),  # noqa: UP045 (the old spelling is what users write too)
        (None, int | None, []),
        ("a", int | None, ["x: expected int | None, got str 'a'"]),
        ("EUR", Literal["EUR", "USD"], []),
        (1, Literal["1"], ["x: expected one of '1', got int 1"]),
        ([1, 2], list[int], []),
        ((1, 2), Sequence[int], []),
        ([1, "b"], list[int], ["x[1]: expected int, got str 'b'"]),
        ({"a": 1}, dict[str, int], []),
        ({"a": "1"}, Mapping[str, int], ["x['a']: expected int, got str '1'"]),
        ({1: 1}, dict[str, int], ["x key 1: expected str, got int 1"]),
        ([1, "a"], tuple[int, str], []),
        ([1], tuple[int, str], ["x: expected 2 items, got 1"]),
        (5, Annotated[int, "meta"], []),
        ("x", Any, []),
        ("x", "NotAType", []),  # a hint the checker does not know: not checked
    ],
)
def test_shapes(value: Any, hint: Any, expected: list[str]) -> None:
    assert problems(value, hint, "x") == expected


def test_long_lists_report_a_few_problems() -> None:
    assert len(problems(list("abcdefghij"), list[int], "x")) == 5


class Order(pydantic.BaseModel):
    sku: str
    qty: int


def test_a_pydantic_model_validates_its_value() -> None:
    assert problems({"sku": "A", "qty": 2}, Order, "order") == []
    found = problems({"sku": "A", "qty": "many"}, Order, "order")
    assert len(found) == 1 and found[0].startswith("order.qty: Input should be a valid integer")


def _tool(**contract: Any) -> Any:
    @tether.tool(risk="write", **contract)
    def send_email(to: str, body: str = "", *, idempotency_key: str = "") -> dict[str, Any]:
        return {}

    return send_email


def test_a_contract_binds_arguments_by_name_without_the_key() -> None:
    seen: list[Any] = []
    rule = tether.Rule(lambda a: seen.append(a) or True, name="see")
    d = _tool(contract=[rule]).__tether_tool__
    verdict = Contract.of(d, ()).judge(["a@example.com"], {})
    assert verdict == {
        "on": "args",
        "verdict": "allow",
        "rules": [{"rule": "see", "on_breach": "refuse", "outcome": "pass"}],
    }
    assert seen == [{"to": "a@example.com", "body": ""}]


def test_rules_checked_when_declared() -> None:
    ok = lambda a: True  # noqa: E731
    with pytest.raises(tether.InvalidInput, match="check must be a function"):
        tether.Rule(3, name="x")  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInput, match="on_breach must be refuse or escalate"):
        tether.Rule(ok, name="x", on_breach="warn")
    with pytest.raises(tether.InvalidInput, match="name"):
        tether.Rule(ok, name="")
    with pytest.raises(tether.InvalidInput, match="tool is a tool's name or a tether tool"):
        tether.Rule(ok, name="x", tool=print)
    assert tether.Rule(ok, name="x", tool=_tool()).tool_name == "send_email"


def test_a_policy_refuses_rules_without_a_tool_or_named_twice() -> None:
    ok = lambda a: True  # noqa: E731
    with pytest.raises(tether.InvalidInput, match="rule 'x' names no tool"):
        tether.Policy(rules=[tether.Rule(ok, name="x")])
    with pytest.raises(tether.InvalidInput, match="two rules are named 'x'"):
        tether.Policy(
            rules=[tether.Rule(ok, name="x", tool="t"), tether.Rule(ok, name="x", tool="t")]
        )
    with pytest.raises(tether.InvalidInput, match="rules holds 'x'"):
        tether.Policy(rules=["x"])  # type: ignore[list-item]


def test_a_tool_refuses_a_contract_it_cannot_take() -> None:
    with pytest.raises(tether.InvalidInput, match=r"contract is True .* or a list of tether\.Rule"):
        _tool(contract="yes")
    other = tether.Rule(lambda a: True, name="x", tool="pay")
    with pytest.raises(tether.InvalidInput, match="rule 'x' names tool 'pay'"):
        _tool(contract=[other])


def _log(*events: tuple[str, dict[str, Any]]) -> list[tether.Event]:
    from tether.model import codec

    return [
        tether.Event("r", seq, type_, codec.encode(data), 1_800_000_000.0 + seq)
        for seq, (type_, data) in enumerate(events, start=1)
    ]


def test_the_fold_keeps_verdicts_at_the_tool_and_cuts_anywhere() -> None:
    rule = {"rule": "to-domain", "on_breach": "escalate", "outcome": "breach", "value": "e@x"}
    tool = {"pos": 2, "name": "send", "kind": "tool"}
    events = _log(
        ("run.created", {"agent": "a"}),
        ("tool.proposed", {**tool, "digest": "d1", "input": {"args": [], "kwargs": {}}}),
        ("tool.verdict", {**tool, "on": "args", "verdict": "escalate", "rules": [rule]}),
        ("approval.requested", {"pos": 1, "name": "approve:send", "payload": {}}),
        ("approval.decided", {"pos": 1, "name": "approve:send", "approved": False, "by": "al"}),
        ("tool.verdict", {**tool, "on": "approval", "verdict": "refuse", "by": "al"}),
    )
    whole = tether.fold(events)
    for cut in range(len(events) + 1):
        assert tether.fold(events[cut:], start=tether.fold(events[:cut], run_id="r")) == whole
    after_proposal = tether.fold(events[:3])
    waiting = after_proposal.step(2)
    assert waiting is not None and (waiting.status, waiting.input_digest) == ("proposed", "d1")
    step = whole.step(2)
    assert step is not None and step.status == "failed"
    assert step.detail is not None
    assert step.detail["contract"]["args"]["rules"] == [rule]
    assert step.detail["contract"]["approval"]["by"] == "al"
    assert whole.step(1).status == "completed"  # type: ignore[union-attr]


def test_variadic_parameters_check_each_value() -> None:
    @tether.tool(risk="read", contract=True)
    def tag(*labels: str, **weights: int) -> None:
        return None

    c = Contract.of(tag.__tether_tool__, ())
    assert c.judge(["a", "b"], {"x": 1})["verdict"] == "allow"
    found = c.judge(["a", 2], {"x": "1"})
    assert found["problems"] == [
        "*labels[1]: expected str, got int 2",
        "x: expected int, got str '1'",
    ]
    assert c.result_problems(None) == [] and c.result_problems(1) == [
        "result: expected None, got int 1"
    ]
