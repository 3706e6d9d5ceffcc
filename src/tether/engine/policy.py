"""The tool policy: which tool calls need a human's approval before they run, and the
rules that judge tool calls (see :mod:`tether.engine.contracts`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tether.engine.contracts import Contract, Rule, policy_rules, unknown_tools
from tether.engine.effects import ToolDef
from tether.model import inputs
from tether.model.durations import parse_duration


class Policy:
    """When tool calls need a human, and what they must satisfy: tools at or above
    ``approve_at`` risk get an automatic ``run.approve("approve:<tool>")`` gate before they
    run; ``rules`` (``tether.Rule``, each naming its tool) judge a call's arguments before
    it runs: a breach refuses it, or escalates it to that same gate (docs/contracts.md)."""

    LEVELS = ("read", "write", "irreversible")

    def __init__(
        self,
        approve_at: str | None = None,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
        rules: Sequence[Rule] = (),
    ) -> None:
        if approve_at is not None and approve_at not in self.LEVELS:
            raise ValueError(f"approve_at must be one of {self.LEVELS} or None, not {approve_at!r}")
        parse_duration(timeout, what="Policy.timeout")  # refused here, not at the first gate
        for a in approvers or ():
            inputs.name(a, "Policy.approvers: an approver")
        self.approve_at = approve_at
        self.approvers = approvers
        self.timeout = timeout
        self.rules = policy_rules(rules)
        # by tool name, built at its first call: the tool and its contract (None: plain)
        self._contracts: dict[str, tuple[ToolDef, Contract | None]] = {}

    def requires_approval(self, risk: str) -> bool:
        if self.approve_at is None:
            return False
        return self.LEVELS.index(risk) >= self.LEVELS.index(self.approve_at)

    def rules_for(self, tool: str) -> tuple[Rule, ...]:
        """The policy's rules that judge ``tool``'s calls."""
        return tuple(r for r in self.rules if r.tool_name == tool)

    def contract_for(self, d: ToolDef) -> Contract | None:
        """The contract judging calls of ``d``: its own and the policy's rules over its
        declared shape (None: a plain tool, which pays nothing)."""
        cached = self._contracts.get(d.name)
        if cached is not None and cached[0] is d:
            return cached[1]
        rules = self.rules_for(d.name)
        c = None if d.rules is None and not rules else Contract.of(d, rules)
        self._contracts[d.name] = (d, c)
        return c

    def check_tools(self, tools: Mapping[str, ToolDef]) -> None:
        """InvalidInput when a rule names a tool that ``tools`` (an App's) does not hold."""
        unknown_tools(self.rules, tools)
