"""Contracts on tools: the agent proposes, the contract judges, the journal applies.

A tool has a contract when it declares one (``@app.tool(contract=True)``: its
annotations; ``contract=[tether.Rule(...)]``: rules too) or the App's
:class:`~tether.Policy` names it in a rule. Its call is then three records
(:mod:`tether.model.verdicts`): the call as proposed, the verdict, and the effect:

1. the arguments are bound to the tool's signature and checked against its annotations
   (:mod:`tether.engine.hints`), then each rule judges them: ``allow``; ``refuse`` (the
   step fails with :class:`~tether.ContractViolation` naming the rule and the value, the
   tool not called); or ``escalate`` (the automatic ``approve:<tool>`` gate asks a human,
   its payload showing the rules that fired; approved, the call goes on, refused, it is
   refused). Wrong types, arguments that are not data, and a rule that raises or answers
   other than True or False always refuse: bad arguments never reach the tool.
2. the proposal and verdict ride with the call's next append (its intent, or its
   completion), so an allowed call costs no extra commit; a refusal is appended at once.
3. after the call, its result is checked against the return annotation; a result that
   does not fit is recorded as such after the effect (which happened) and fails the step.

Replay reads the verdicts from the log and never judges a recorded call again: the rules
that judged it stand, whatever the code says now. A tool without a contract pays nothing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.engine import hints
from tether.engine import journal as journals
from tether.engine.calls import Core, Slot
from tether.engine.effects import ToolDef, tool_core
from tether.engine.gates import approve_core
from tether.engine.retry import Retry
from tether.errors import ApprovalDenied, ContractViolation, EncodeError, InvalidInput, InvalidState
from tether.model import codec, inputs
from tether.model import events as ev
from tether.model.secrets import reveal_all
from tether.model.steps import StepState
from tether.model.verdicts import contract_of, refusal

ON_BREACH = ("refuse", "escalate")
KEY = "idempotency_key"  # tether's own parameter: never the agent's to propose


@dataclass(frozen=True)
class Rule:
    """A rule over a tool's arguments: ``check`` answers True (allowed) or False (breached).

    ``check`` receives the arguments by parameter name (a dict, defaults applied), or with
    ``arg`` the value of that argument alone. ``on_breach``: ``refuse`` (the step fails
    with ContractViolation) or ``escalate`` (a human approves or refuses the call).
    ``tool``: the tool's name or the tool, in a :class:`~tether.Policy`; left out on
    ``@app.tool(contract=[...])``. ``name`` (and ``description``, ``version``) are
    recorded in every verdict, so the log says which rule, in which version, judged."""

    check: Callable[[Any], bool]
    name: str
    tool: str | Callable[..., Any] | None = None
    arg: str | None = None
    description: str = ""
    on_breach: str = "refuse"
    version: str | None = None
    _tool_name: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        inputs.name(self.name, "tether.Rule: its name")
        where = f"tether.Rule {self.name!r}"
        if not callable(self.check):
            raise InvalidInput(
                f"{where}: check must be a function of the arguments, not {self.check!r}"
            )
        if self.on_breach not in ON_BREACH:
            raise InvalidInput(
                f"{where}: on_breach must be refuse or escalate, not {self.on_breach!r}"
            )
        if self.arg is not None:
            inputs.name(self.arg, f"{where}: arg")
        if self.version is not None and not isinstance(self.version, str):
            raise InvalidInput(f"{where}: version is a str ('2'), not {self.version!r}")
        if not isinstance(self.description, str):
            raise InvalidInput(f"{where}: description is a str, not {self.description!r}")
        object.__setattr__(self, "_tool_name", _tool_name(self.tool, where))

    @property
    def tool_name(self) -> str | None:
        """The name of the tool this rule judges (None: the tool it was declared on)."""
        return self._tool_name

    def record(self) -> dict[str, Any]:
        """What a verdict records of this rule (its identity, never its code)."""
        out: dict[str, Any] = {"rule": self.name, "on_breach": self.on_breach}
        for key in ("arg", "description", "version"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def _tool_name(tool: Any, where: str) -> str | None:
    if tool is None:
        return None
    if isinstance(tool, str):
        return inputs.name(tool, f"{where}: tool")
    d = getattr(tool, "__tether_tool__", None)
    if isinstance(d, ToolDef):
        return d.name
    raise InvalidInput(f"{where}: tool is a tool's name or a tether tool, not {tool!r}")


def tool_rules(name: str, contract: Any) -> tuple[Rule, ...] | None:
    """``@app.tool(contract=...)`` checked: None (no contract), or the tool's own rules
    (``()`` for ``contract=True``: its annotations alone)."""
    if contract is None or contract is False:
        return None
    if contract is True:
        return ()
    if isinstance(contract, Rule):
        contract = [contract]
    if isinstance(contract, str) or not isinstance(contract, Sequence):
        raise InvalidInput(
            f"tool {name!r}: contract is True (check its annotations) or a list of "
            f"tether.Rule, not {contract!r}"
        )
    for r in contract:
        if not isinstance(r, Rule):
            raise InvalidInput(f"tool {name!r}: contract= holds {r!r}, which is not a tether.Rule")
        if r.tool_name not in (None, name):
            raise InvalidInput(
                f"tool {name!r}: rule {r.name!r} names tool {r.tool_name!r}; a rule declared "
                f"on a tool judges that tool (leave tool= out)"
            )
    _unique(name, contract)
    return tuple(contract)


def policy_rules(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """``Policy(rules=...)`` checked: each a Rule naming its tool, one name per tool."""
    if isinstance(rules, Rule) or not isinstance(rules, Sequence):
        raise InvalidInput(f"Policy: rules is a list of tether.Rule, not {rules!r}")
    by_tool: dict[str, list[Rule]] = {}
    for r in rules:
        if not isinstance(r, Rule):
            raise InvalidInput(f"Policy: rules holds {r!r}, which is not a tether.Rule")
        if r.tool_name is None:
            raise InvalidInput(
                f"Policy: rule {r.name!r} names no tool: tether.Rule(check, name=..., "
                f"tool='send_email') (a rule without tool= goes on @app.tool(contract=[...]))"
            )
        by_tool.setdefault(r.tool_name, []).append(r)
    for tool, some in by_tool.items():
        _unique(tool, some)
    return tuple(rules)


def _unique(tool: str, rules: Sequence[Rule]) -> None:
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidInput(f"tool {tool!r}: two rules are named {twice[0]!r}; name each once")


def unknown_tools(rules: Sequence[Rule], tools: Mapping[str, ToolDef]) -> None:
    """Refuse a policy whose rule names a tool the App does not register (a typo would
    leave the tool unguarded)."""
    for r in rules:
        if r.tool_name not in tools:
            known = ", ".join(sorted(tools)) or "none"
            raise InvalidInput(
                f"Policy: rule {r.name!r} names tool {r.tool_name!r}, which this app does not "
                f"register (its tools: {known}); register it first, or fix the name"
            )


@dataclass(frozen=True)
class Contract:
    """A tool's contract as judged: its signature, annotations and rules (its own first)."""

    tool: ToolDef
    signature: inspect.Signature
    hints: Mapping[str, Any]
    rules: tuple[Rule, ...]

    @classmethod
    def of(cls, d: ToolDef, rules: Sequence[Rule]) -> Contract:
        """Build it (InvalidInput when the tool's annotations cannot be resolved)."""
        try:
            sig = inspect.signature(d.fn)
            hints = typing.get_type_hints(d.fn, include_extras=True)
        except (NameError, TypeError, ValueError) as e:
            raise InvalidInput(
                f"tool {d.name!r}: its contract needs its signature and annotations, which "
                f"cannot be read ({type(e).__name__}: {e}); import the names they use"
            ) from None
        params = [p for p in sig.parameters.values() if p.name != KEY]
        return cls(d, sig.replace(parameters=params), hints, (*(d.rules or ()), *rules))

    def judge(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The verdict on the arguments (plain data, as ``tool.verdict`` records it)."""
        try:
            given = self.signature.bind(*reveal_all(list(args)), **reveal_all(dict(kwargs)))
        except TypeError as e:
            return _verdict("refuse", problems=[f"arguments: {e}"])
        found = [p for k, v in given.arguments.items() for p in self._param(k, v)]
        if found:
            return _verdict("refuse", problems=found[: hints.MAX_PROBLEMS])
        given.apply_defaults()
        judged = [judge_rule(r, dict(given.arguments), self.tool.secret) for r in self.rules]
        return _verdict(_worst(judged), rules=judged)

    def _param(self, name: str, value: Any) -> list[str]:
        hint = self.hints.get(name, Any)
        kind = self.signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            return [
                p for i, v in enumerate(value) for p in hints.problems(v, hint, f"*{name}[{i}]")
            ]
        if kind == inspect.Parameter.VAR_KEYWORD:
            return [p for k, v in value.items() for p in hints.problems(v, hint, k)]
        return hints.problems(value, hint, name)

    def result_problems(self, output: Any) -> list[str]:
        """What is wrong with the tool's result as its return annotation (empty: fits)."""
        if "return" not in self.hints:
            return []
        return hints.problems(output, self.hints["return"], "result")


def judge_rule(rule: Rule, arguments: dict[str, Any], secret: frozenset[str]) -> dict[str, Any]:
    """One rule's judgement: ``pass``, ``breach``, or ``error`` (it raised, or answered
    something other than a bool). The value judged is recorded when a breach names it."""
    out = rule.record()
    value = arguments.get(rule.arg) if rule.arg is not None else arguments
    try:
        answer = rule.check(value)
    except Exception as e:
        out.update(outcome="error", error=f"{type(e).__name__}: {e}"[:500])
    else:
        if isinstance(answer, bool):
            out["outcome"] = "pass" if answer else "breach"
        else:
            out.update(outcome="error", error=f"answered {answer!r}, not True or False"[:500])
    if out["outcome"] != "pass" and rule.arg is not None:
        out["value"] = "***" if rule.arg in secret else _storable(value)
    return out


def _storable(value: Any) -> Any:
    try:
        codec.encode(value)
    except EncodeError:
        return repr(value)[:200]
    return value


def _worst(judged: list[dict[str, Any]]) -> str:
    fired = [r for r in judged if r["outcome"] != "pass"]
    if any(r["outcome"] == "error" or r["on_breach"] == "refuse" for r in fired):
        return "refuse"
    return "escalate" if fired else "allow"


def _verdict(verdict: str, **more: Any) -> dict[str, Any]:
    return {"on": "args", "verdict": verdict, **{k: v for k, v in more.items() if v}}


# -- the call: proposed, judged, gated, applied ----------------------------------------


def tool_call(
    j: journals.Journal,
    d: ToolDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: Any,  # tether.engine.policy.Policy (which imports this module)
    groups: frozenset[str],
    retry: Retry,
) -> Core:
    """A tool call through the run: its approval gate when the policy or a rule asks for
    one, then its call. The log wins over the code: a recorded gate is replayed, a
    recorded call is neither gated nor judged afresh, so changing the policy or the rules
    never breaks a run in flight."""
    contract = policy.contract_for(d)
    gate = f"approve:{d.name}"
    rec = j.peek()
    at_gate = rec is not None and rec.kind == "approve" and rec.name == gate
    if contract is None and _judged_before(j, rec, at_gate):
        contract = Contract.of(d, ())  # its contract is gone; the log's verdicts stand
    if contract is None:
        if (rec is None and policy.requires_approval(d.risk)) or at_gate:
            ask = (policy.approvers, policy.timeout, groups)
            approve_core(j, gate, _payload(d, args, kwargs), *ask)
        return tool_core(j, d, args, kwargs, retry)
    call = _Judged(j, contract, args, kwargs)
    if rec is None:
        call.verdict = contract.judge(args, kwargs) if call.storable() else call.verdict
        escalated = call.verdict["verdict"] == "escalate"
        at_gate = call.verdict["verdict"] != "refuse" and (
            escalated or policy.requires_approval(d.risk)
        )
        if at_gate:
            call.propose_with_gate()
    if at_gate:
        payload = _payload(d, args, kwargs) | call.fired()
        try:
            approve_core(j, gate, payload, policy.approvers, policy.timeout, groups)
        except ApprovalDenied as denied:
            raise call.denied(denied) from None
    return tool_core(j, d, args, kwargs, retry, check=call)


def _judged_before(j: journals.Journal, rec: StepState | None, at_gate: bool) -> bool:
    """Whether the log holds verdicts for this call: at the next position, or at the one
    after its recorded gate."""
    if at_gate:
        rec = j.recorded[j.pos + 1] if j.pos + 1 < len(j.recorded) else None
    return contract_of(rec) is not None


def _payload(d: ToolDef, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {"tool": d.name, "risk": d.risk, "args": list(args), "kwargs": dict(kwargs)}


class _Judged:
    """One call of a tool with a contract: its proposal and verdict, recorded or replayed
    at the tool's position (:func:`tether.engine.effects.tool_core` calls :meth:`before`
    once it has the slot, and wraps the call in :meth:`after`)."""

    def __init__(
        self, j: journals.Journal, c: Contract, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        self.j, self.c = j, c
        self.inputs = {"args": list(args), "kwargs": dict(kwargs)}
        self.verdict: dict[str, Any] = {}  # judged in this execution (empty: not yet)
        self.unstorable: str | None = None
        self.recorded: Mapping[str, Any] | None = None  # the verdicts the log holds

    @property
    def name(self) -> str:
        return self.c.tool.name

    def storable(self) -> bool:
        """Whether the arguments are data the log can record; if not, the call is refused
        (a proposal that cannot be recorded cannot be judged on replay either)."""
        if codec.is_plain(self.inputs):
            return True  # JSON as it is: no encoding needed to know
        try:
            codec.encode(self.inputs, what="the proposed arguments")
        except EncodeError as e:
            where = e.path.replace("$.args", "args", 1).replace("$.kwargs", "kwargs", 1)
            self.unstorable = f"{e.type_name} at {where}"
            self.verdict = _verdict("refuse", problems=[f"{where}: not data ({e.type_name})"])
            return False
        return True

    def _events(self, pos: int) -> list[Any]:
        proposed: dict[str, Any] = {"pos": pos, "name": self.name, "kind": "tool"}
        proposed |= {"digest": codec.digest(self.inputs), "risk": self.c.tool.risk}
        if self.unstorable is None:
            proposed["input"] = self.inputs
        else:
            proposed |= {"input": None, "unstorable": self.unstorable}
        if self.verdict["verdict"] == "refuse":
            self.verdict["message"] = self.message(pos, self.verdict)
        verdict = {"pos": pos, "name": self.name, "kind": "tool", **self.verdict}
        return [self.j.event(ev.TOOL_PROPOSED, proposed), self.j.event(ev.TOOL_VERDICT, verdict)]

    def propose_with_gate(self) -> None:
        """Record the proposal and verdict with the gate's request: the gate takes the next
        position, the tool the one after."""
        if journals._RESERVED.get() is not None:
            raise InvalidState(
                f"run {self.j.run_id}: tool {self.name!r} needs an approval, which takes a "
                f"position of its own before the call: a branch of run.parallel makes one "
                f"journaled call; make this call outside the fan-out"
            )
        self.j.defer(self._events(self.j.pos + 2))

    def fired(self) -> dict[str, Any]:
        """What the approval's payload shows of the verdict: the rules that fired."""
        rules = _fired(self.verdict)
        return {"contract": {"verdict": self.verdict["verdict"], "rules": rules}} if rules else {}

    def denied(self, denied: ApprovalDenied) -> BaseException:
        """The gate was refused: the call is refused at the tool's position (recorded, so
        that the positions after it replay), as a ContractViolation when a rule asked."""
        nxt = self.j.peek()
        if nxt is not None and (nxt.kind, nxt.name) != ("tool", self.name):
            return denied  # denied before the tool had a contract: the run went on past it
        slot = self.j.slot("tool", self.name, codec.digest(self.inputs))
        recorded = contract_of(slot.recorded) or {}
        judged = recorded.get("args") or {}
        refused = recorded.get("approval")
        if refused is None:
            how = "timed out" if denied.timed_out else f"refused by {denied.by}"
            refused = {"on": "approval", "verdict": "refuse", "by": denied.by}
            refused |= {"reason": denied.reason, "rules": _fired(judged)}
            refused["message"] = self.message(slot.pos, refused, how=how)
            data = {"pos": slot.pos, "name": self.name, "kind": "tool", **refused}
            self.j.append([self.j.event(ev.TOOL_VERDICT, data)])
        if judged.get("verdict") != "escalate":
            return denied  # the policy's own gate (approve_at): its denial, as before
        return self._violation(slot, refused)

    def before(self, slot: Slot) -> None:
        """At the tool's position, before its call: replay the recorded verdict (a refusal
        raises again), or record the one judged now (a refusal raises)."""
        self.recorded = contract_of(slot.recorded)
        if self.recorded is not None and self.recorded.get("args") is not None:
            refused = refusal(self.recorded)
            if refused is not None:
                raise self._violation(slot, refused)
            return
        if slot.done:
            return  # a call completed before its tool had a contract: the log wins
        if not self.verdict:  # in flight when its contract came: judged before it goes on
            self.verdict = self.c.judge(**_split(self.inputs)) if self.storable() else self.verdict
            if self.verdict["verdict"] == "escalate":
                self.verdict = {**self.verdict, "verdict": "refuse"}  # no gate can come first now
        events = self._events(slot.pos)
        if self.verdict["verdict"] != "refuse":
            self.j.defer(events)  # rides with the intent or the completion: no extra commit
            return
        self.j.append(events)
        raise self._violation(slot, self.verdict)

    def after(self, slot: Slot, core: Core, key: str | None) -> Core:
        """The call, then its result checked against its declared shape: a result that
        does not fit is recorded after the effect, and fails the step."""
        output = yield from core
        if slot.done and self.recorded is None:
            return output  # completed before its tool had a contract: the log wins
        problems = self.c.result_problems(output)
        if not problems:
            return output
        data = {"pos": slot.pos, "name": self.name, "kind": "tool", "on": "result"}
        data |= {"verdict": "refuse", "problems": problems, "key": key}
        data["message"] = self.message(slot.pos, data)
        self.j.append([self.j.event(ev.TOOL_VERDICT, data)])
        raise self._violation(slot, data)

    def _violation(self, slot: Slot, v: Mapping[str, Any]) -> ContractViolation:
        """The error a refusal raises, from its recorded data (the same on every replay),
        with the run's failure context at the tool's step."""
        err = _violation(self.j.run_id, self.name, slot.pos, v)
        ctx = self.j.failure_context(err, slot, codec.digest(self.inputs), self.inputs)
        self.j.last_failure = (err, ctx)
        return err

    def message(self, pos: int, v: Mapping[str, Any], how: str = "") -> str:
        """The ContractViolation's message, recorded with the refusal (a replay raises the
        same words)."""
        head = f"run {self.j.run_id}: tool {self.name!r} (position {pos})"
        see = "The refusal is in the run's log."
        if v["on"] == "result":
            happened = (
                f"its effect is recorded as completed (key {v.get('key')}), so it is not "
                f"made again, and its compensation (compensate=), if any, undoes it when the "
                f"run fails"
                if self.c.tool.writes
                else "its result is recorded as it came"
            )
            return (
                f"{head} returned a result that breaks its declared shape: "
                f"{'; '.join(v['problems'])}. The call happened: {happened}."
            )
        fired = _fired(v)
        if v["on"] == "approval":
            why = f"; rule {_rule_words(fired[0])} asked for it" if fired else ""
            reason = f": {v['reason']}" if v.get("reason") else ""
            return f"{head}: its approval was {how}{reason}{why}. The tool was not called. {see}"
        if v.get("problems"):
            what = (
                "are not data the log can record"
                if self.unstorable
                else "do not fit its declared shape"
            )
            return (
                f"{head} refused by its contract: its arguments {what}: "
                f"{'; '.join(v['problems'])}. The tool was not called. {see}"
            )
        r = next(r for r in fired if r["outcome"] == "error" or r["on_breach"] == "refuse")
        if r["outcome"] == "error":
            return (
                f"{head} refused by its contract: rule {_rule_words(r)} failed "
                f"({r.get('error')}); a rule that fails refuses the call: fix the rule. "
                f"The tool was not called. {see}"
            )
        return (
            f"{head} refused by its contract: rule {_rule_words(r)} was breached. The "
            f"tool was not called. {see}"
        )


def _fired(v: Mapping[str, Any]) -> list[Any]:
    """The rules of verdict ``v`` that did not pass."""
    return [r for r in v.get("rules") or () if r.get("outcome") != "pass"]


def _split(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {"args": inputs["args"], "kwargs": inputs["kwargs"]}


def _rule_words(r: Mapping[str, Any]) -> str:
    text = repr(r["rule"]) + (f" v{r['version']}" if r.get("version") else "")
    text += f" ({r['description']})" if r.get("description") else ""
    if r.get("arg") is not None:
        text += f" judging {r.get('arg')}={r.get('value')!r}"
    return text


def _violation(run_id: str, tool: str, pos: int, v: Mapping[str, Any]) -> ContractViolation:
    """The error a refusal raises, from its recorded data (the same on every replay)."""
    fired = _fired(v)
    rule = "shape" if v.get("problems") or not fired else str(fired[0]["rule"])
    value = fired[0].get("value") if fired else None
    return ContractViolation(
        str(v.get("message", "")),
        run_id=run_id,
        tool=tool,
        position=pos,
        stage=str(v["on"]),
        rule=rule,
        value=value,
    )


def in_force(policy: Any, tools: Mapping[str, ToolDef]) -> list[dict[str, Any]]:
    """The contracts an App judges its tools' calls by (``tether show --app``): per tool
    with one, its rules (its own, then the policy's) as a verdict records them."""
    out = []
    for name, d in sorted(tools.items()):
        own = [{**r.record(), "from": "tool"} for r in d.rules or ()]
        rules = own + [{**r.record(), "from": "policy"} for r in policy.rules_for(name)]
        if d.rules is not None or rules:
            out.append({"tool": name, "rules": rules})
    return out
