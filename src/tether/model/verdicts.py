"""Verdicts: what a tool's contract said of a call, as the log records it (pure).

A tool with a contract or rules (:mod:`tether.engine.contracts`) has its call recorded as
three things: ``tool.proposed`` (the arguments the agent proposed), ``tool.verdict``
(``on`` the arguments: ``allow``, ``refuse`` or ``escalate``, with every rule that judged
and the shape problems found) and then the effect (``tool.intent``, ``step.completed``).
An escalated call's approval that was refused adds a verdict ``on`` ``approval``; a result
that breaks its declared shape adds one ``on`` ``result`` after the effect.

The fold keeps them in the tool step's ``detail["contract"]`` (``{"args": …, "approval":
…, "result": …}``), so a replay finds the verdict the log holds instead of judging the
call again, and ``tether show`` prints which rules judged it. A proposed call waiting for
its approval is a step of status ``proposed``; a refused one is ``failed``. A result's
refusal leaves the step ``completed``: its effect happened (and stays undoable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from tether.model.events import Event
from tether.model.status import UNRECORDED, StepStatus
from tether.model.steps import StepState

VERDICTS = ("allow", "refuse", "escalate")
STAGES = ("args", "approval", "result")
VIOLATION = "tether.errors.ContractViolation"  # the error type a refusal records


class Steps(Protocol):
    """What the fold's accumulator offers these handlers (tether.model.state._Fold)."""

    n: int

    def at(self, pos: int) -> StepState: ...

    def put_step(self, pos: int, step: StepState) -> None: ...


def contract_of(step: StepState | None) -> Mapping[str, Any] | None:
    """The verdicts the log holds for the tool call at ``step`` (None: never judged)."""
    if step is None or not step.detail:
        return None
    found = step.detail.get("contract")
    return found if isinstance(found, Mapping) else None


def refusal(contract: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The verdict that refused the call (arguments, approval or result), or None."""
    for stage in STAGES:
        v = (contract or {}).get(stage)
        if v is not None and v.get("verdict") == "refuse":
            return v  # type: ignore[no-any-return]
    return None


def _existing(f: Steps, pos: int) -> StepState | None:
    if pos <= f.n and f.at(pos).status != UNRECORDED:
        return f.at(pos)
    return None


def fold_proposed(f: Steps, e: Event, d: dict[str, Any]) -> None:
    """A proposed call: a new step of status ``proposed`` (or the step the log already
    holds at that position, a call in flight before its tool had a contract)."""
    pos = d["pos"]
    old = _existing(f, pos)
    if old is None:
        old = StepState(
            pos,
            d["name"],
            "tool",
            StepStatus.PROPOSED,
            input_digest=d.get("digest"),
            started_at=e.at,
        )
    detail = {**(old.detail or {}), "contract": {"proposed": e.seq}}
    f.put_step(pos, replace(old, detail=detail, seq=e.seq))


def fold_verdict(f: Steps, e: Event, d: dict[str, Any]) -> None:
    """A verdict: kept in the step's contract detail; a refusal of the arguments or of the
    approval fails the step (a refused result leaves it completed: it happened)."""
    pos = d["pos"]
    old = _existing(f, pos) or StepState(pos, d["name"], "tool", StepStatus.PROPOSED)
    verdict = {k: v for k, v in d.items() if k not in ("pos", "name", "kind")}
    contract = {**(contract_of(old) or {}), d["on"]: verdict}
    step = replace(old, detail={**(old.detail or {}), "contract": contract}, seq=e.seq)
    if d["verdict"] == "refuse" and d["on"] != "result":
        error = {"type": VIOLATION, "message": d.get("message", ""), "at": e.at}
        step = replace(
            step, status=StepStatus.FAILED, errors=(*old.errors, error), finished_at=e.at
        )
    f.put_step(pos, step)


def kept(old: StepState) -> dict[str, Any]:
    """What a later record of the step (its intent) keeps of its detail: the contract."""
    contract = contract_of(old)
    return {"contract": contract} if contract is not None else {}


# -- words, for tether show and tether log -------------------------------------------


def rule_words(r: Mapping[str, Any]) -> str:
    """``to-domain v2 (to ends with @example.com): breach, to='eve@evil.com'``."""
    name = str(r.get("rule"))
    if r.get("version"):
        name += f" v{r['version']}"
    if r.get("description"):
        name += f" ({r['description']})"
    out = f"{name}: {r.get('outcome')}"
    if r.get("outcome") != "pass" and "value" in r:
        out += f", {r.get('arg') or 'arguments'}={_short(r.get('value'))}"
    if r.get("error"):
        out += f" ({r['error']})"
    return out


def verdict_words(v: Mapping[str, Any]) -> str:
    """One verdict in a line: what it decided, on what, and why."""
    text = f"{v.get('on')}: {v.get('verdict')}"
    if v.get("by"):
        text += f" by {v['by']}" + (f" ({v['reason']})" if v.get("reason") else "")
    problems: Sequence[str] = v.get("problems") or ()
    if problems:
        text += "; shape: " + "; ".join(problems)
    fired = [r for r in v.get("rules") or () if r.get("outcome") != "pass"]
    if fired:
        text += "; " + "; ".join(rule_words(r) for r in fired)
    passed = [str(r.get("rule")) for r in v.get("rules") or () if r.get("outcome") == "pass"]
    if passed:
        text += f"; passed: {', '.join(passed)}"
    return text


def event_words(type_: str, d: Mapping[str, Any]) -> str:
    """``tether log``'s summary of a ``tool.proposed`` or ``tool.verdict`` event."""
    step = f"{d.get('pos')} {d.get('name')}"
    if type_ == "tool.proposed":
        if d.get("input") is None:
            return f"{step}: arguments not storable ({d.get('unstorable')})"
        return f"{step}{_call(d['input'])}"
    return f"{step} {verdict_words(d)}"


def show_lines(steps: Sequence[StepState]) -> list[str]:
    """``tether show``'s contract lines: each judged call, its verdicts and rules."""
    out = []
    for s in steps:
        contract = contract_of(s)
        if contract is None:
            continue
        for stage in STAGES:
            v = contract.get(stage)
            if v is not None:
                out.append(f"{s.position} {s.name} {verdict_words(v)}")
    return out


def _call(inputs: Mapping[str, Any]) -> str:
    args = [_short(a) for a in inputs.get("args") or ()]
    args += [f"{k}={_short(v)}" for k, v in (inputs.get("kwargs") or {}).items()]
    text = f"({', '.join(args)})"
    return text if len(text) <= 100 else text[:99] + "…"


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
