"""The meter of one execution: prices a model call's usage and stops a run at its limits.

A :class:`Meter` rides on the :class:`~tether.engine.journal.Journal`. Before a call
takes a new position (not one the log answers), :meth:`Meter.check` compares what the
run used with its limits, from memory: the usage folded when the run was loaded plus
the model calls made since, the position, and the clock. No database read per step.
A limit reached appends ``budget.exceeded`` (the limit, its maximum, the usage) and
either makes the run wait (``on_exceeded="wait"``: a human raises it, see
:mod:`tether.services.budgets`) or fails it with :class:`~tether.errors.BudgetExceeded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import BudgetExceeded
from tether.model import budgets
from tether.model import events as ev
from tether.model.budgets import Limits, Price
from tether.model.state import RunState
from tether.model.steps import Usage, usage_of

if TYPE_CHECKING:
    from tether.engine.calls import Slot
    from tether.engine.journal import Journal


class Meter:
    """What one execution of a run may spend, and what it spent (see the module docstring)."""

    def __init__(
        self, limits: Limits | None, prices: Mapping[str, Price], state: RunState, now: float
    ) -> None:
        self.limits = limits
        self.prices = prices
        self.usage = state.usage
        self.created_at = state.created_at if state.created_at is not None else now

    def check(self, j: Journal, slot: Slot) -> None:
        """Raise (after appending ``budget.exceeded``) when the call at ``slot`` would go
        past a limit: Suspended to wait for a raise, or BudgetExceeded to fail."""
        limits = self.limits
        if limits is None or slot.kind == "compensate":  # undoing is never held by a budget
            return
        age = j.clock.now() - self.created_at
        limit = budgets.exceeded(limits, slot.kind, slot.pos, self.usage, age)
        if limit is None:
            return
        maximum = getattr(limits, budgets.NAMES[limit])
        used = budgets.used(slot.pos - 1, self.usage, age)
        data = {
            "pos": slot.pos,
            "name": slot.name,
            "kind": slot.kind,
            "limit": limit,
            "max": maximum,
            "used": used,
            "on_exceeded": limits.on_exceeded,
        }
        event = j.event(ev.BUDGET_EXCEEDED, data)
        if limits.on_exceeded == "wait":
            raise j.suspend([event], f"budget:{limit}", None)
        j.append([event])
        err = BudgetExceeded(
            j.run_id,
            limit,
            maximum,
            used[limit],
            f"{slot.kind} {slot.name!r} (position {slot.pos})",
        )
        j.poisoned = err  # an agent that catches it still makes no further call
        raise err

    def record(self, output: Any, model: Any = None) -> dict[str, Any] | None:
        """Count a model call's usage; return it to store with the step when its cost was
        computed here (the result reported none, and ``prices`` names its model)."""
        raw = usage_of(output)
        if raw is None:  # stored, so that the fold counts the call as this count did
            self.usage = self.usage + Usage(calls=1)
            return {"input_tokens": 0, "output_tokens": 0, "cost": 0.0, "calls": 1}
        priced = None
        if not raw["cost"]:
            price = self.prices.get(str(model_of(output) or model or ""))
            if price is not None:
                cached = cached_tokens(output)
                raw = {**raw, "cost": price.cost(raw["input_tokens"], raw["output_tokens"], cached)}
                priced = raw
        self.usage = self.usage + Usage(**raw)
        return priced


def meter(
    agent: Limits | None, prices: Mapping[str, Price], state: RunState, now: float
) -> Meter | None:
    """The meter of an execution of ``state``'s run by an agent with limits ``agent``:
    the agent's and the run's limits with the raises since; None with neither nor prices."""
    budget = state.budget or {}
    limits = budgets.combine(agent, Limits.of(budget.get("limits")), budget.get("added") or {})
    if limits is None and not prices:
        return None
    return Meter(limits, prices, state, now)


def model_of(result: Any) -> Any:
    """The model a result names (``{"model": ...}`` or a ``model`` attribute), or None."""
    return result.get("model") if isinstance(result, dict) else getattr(result, "model", None)


def cached_tokens(result: Any) -> int:
    """Input tokens a provider served from its prompt cache, as the result reports them
    (``usage.cached_input_tokens``, or ``usage.prompt_tokens_details.cached_tokens`` /
    ``usage.input_tokens_details.cached_tokens``); 0 when it does not."""
    usage = result.get("usage") if isinstance(result, dict) else getattr(result, "usage", None)
    for key in ("cached_input_tokens", "prompt_tokens_details", "input_tokens_details"):
        value = _get(usage, key)
        if key != "cached_input_tokens":
            value = _get(value, "cached_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
