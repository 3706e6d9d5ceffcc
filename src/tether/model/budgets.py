"""Budgets and prices as values: :class:`Limits` (what a run may spend), :class:`Price`
(what a model's tokens cost) and the arithmetic on them. Pure, no I/O.

A run's *limits* are the agent's (``@app.agent(limits=...)``) and the run's own
(``app.run(..., limits=...)``, stored in its ``run.created`` event) together: each
limit that both name is the smaller of the two. Every ``budget.raised`` event adds
to them. What a run has *used* is folded from its log (:class:`~tether.model.steps.Usage`,
its positions, its age), so a resume in any process enforces the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from tether.errors import InvalidInput
from tether.model.durations import Duration, parse_duration
from tether.model.steps import Usage

# What a limit may be at most: far beyond any real budget, small enough to be exact
MAX_COUNT = 10**12  # steps, model calls, tokens
MAX_COST = 1e12
MAX_PRICE = 1e6  # per million tokens
ON_EXCEEDED = ("wait", "fail")
# A limit's short name (``tether budget RUN --add steps=10``) -> its Limits field
NAMES = {
    "steps": "max_steps",
    "model_calls": "max_model_calls",
    "tokens": "max_tokens",
    "cost": "max_cost",
    "duration": "max_duration",
}


def _count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be a whole number, not {type(value).__name__} {value!r}")
    if not 0 <= value <= MAX_COUNT:
        raise InvalidInput(f"{what} must be between 0 and {MAX_COUNT:,}, got {value!r}")
    return value


def _amount(value: Any, what: str, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number, not {type(value).__name__} {value!r}")
    if not math.isfinite(value) or not 0 <= value <= high:
        raise InvalidInput(f"{what} must be a finite number between 0 and {high:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a run may spend before it stops, BEFORE its next journaled call.

    ``max_steps``: journaled calls (positions: steps, model calls, tools, decisions…);
    ``max_model_calls``: ``run.llm`` calls; ``max_tokens``: input plus output tokens of
    the model calls; ``max_cost``: their cost (reported by the model, or computed from
    ``tether.open(prices=...)``); ``max_duration``: seconds (or ``"10m"``) since the run
    was created, waits included. None: no limit. ``on_exceeded``: ``"wait"`` (the run
    waits for a human to raise its budget: ``tether budget RUN --add steps=10``) or
    ``"fail"`` (the run fails, "budget exceeded"). Checked when built: a negative, nan
    or huge value raises InvalidInput.
    """

    max_steps: int | None = None
    max_model_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_duration: Duration | None = None
    on_exceeded: str = "wait"

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_model_calls", "max_tokens"):
            _count(getattr(self, name), f"Limits.{name}")
        object.__setattr__(self, "max_cost", _amount(self.max_cost, "Limits.max_cost", MAX_COST))
        seconds = parse_duration(self.max_duration, what="Limits.max_duration")
        object.__setattr__(self, "max_duration", seconds)
        if self.on_exceeded not in ON_EXCEEDED:
            raise InvalidInput(f"Limits.on_exceeded is 'wait' or 'fail', not {self.on_exceeded!r}")

    def data(self) -> dict[str, Any]:
        """The limits as plain data (for the log), unset ones left out."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in values.items() if v is not None}

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> Limits | None:
        """Inverse of :meth:`data` (None stays None)."""
        return None if data is None else cls(**dict(data))


def check_limits(value: Any, what: str) -> Limits | None:
    """``value`` if it is a Limits or None, else a clear error."""
    if value is not None and not isinstance(value, Limits):
        raise InvalidInput(
            f"{what} takes tether.Limits(max_steps=..., max_cost=...), not "
            f"{type(value).__name__} {value!r}"
        )
    return value


def combine(agent: Limits | None, run: Limits | None, added: Mapping[str, float]) -> Limits | None:
    """The limits in force: the agent's and the run's (the smaller of each named by both;
    the run's ``on_exceeded`` wins), plus what was raised (``added``: field -> amount)."""
    if agent is None and run is None:
        return None
    values: dict[str, Any] = {}
    for name in NAMES.values():
        named = [getattr(x, name) for x in (agent, run) if x is not None]
        named = [v for v in named if v is not None]
        if named:
            values[name] = min(named) + added.get(name, 0)
    policy = (run or agent or Limits()).on_exceeded
    if run is not None and agent is not None and run.on_exceeded == "wait":
        policy = agent.on_exceeded  # only a run that names "fail" overrides its agent's
    return Limits(**values, on_exceeded=policy)


def parse_additions(items: Mapping[str, Any]) -> dict[str, float]:
    """``{"steps": 10, "cost": 1.5}`` (short names, or the field names) -> field -> amount,
    checked: an unknown name, a negative, nan or huge amount raises InvalidInput."""
    if not items:
        raise InvalidInput(
            f"raise a budget by at least one limit, e.g. steps=10; the limits: {', '.join(NAMES)}"
        )
    out: dict[str, float] = {}
    for key, value in items.items():
        name = NAMES.get(key, key if key in NAMES.values() else None)
        if name is None:
            raise InvalidInput(
                f"unknown limit {key!r}: raise one of {', '.join(NAMES)} (e.g. steps=10)"
            )
        what = f"the raise of {key}"
        if name == "max_cost":
            amount: float | None = _amount(value, what, MAX_COST)
        elif name == "max_duration":
            amount = parse_duration(value, what=what)
        else:
            amount = _count(value, what)
        assert amount is not None
        out[name] = out.get(name, 0) + amount
    return out


def exceeded(limits: Limits, kind: str, steps: int, usage: Usage, age: float) -> str | None:
    """Which limit (its short name) a call of ``kind`` taking position ``steps`` would go
    past, given the ``usage`` so far and the run's ``age`` in seconds; None: within."""
    if limits.max_steps is not None and steps > limits.max_steps:
        return "steps"
    calls, tokens = usage.calls, usage.input_tokens + usage.output_tokens
    if kind == "llm" and limits.max_model_calls is not None and calls >= limits.max_model_calls:
        return "model_calls"
    if limits.max_tokens is not None and tokens >= limits.max_tokens:
        return "tokens"
    if limits.max_cost is not None and usage.cost >= limits.max_cost:
        return "cost"
    if limits.max_duration is not None and age >= cast(float, limits.max_duration):
        return "duration"
    return None


def used(steps: int, usage: Usage, age: float) -> dict[str, Any]:
    """What a run used, by limit name (recorded with a ``budget.exceeded`` event)."""
    return {
        "steps": steps,
        "model_calls": usage.calls,
        "tokens": usage.input_tokens + usage.output_tokens,
        "cost": usage.cost,
        "duration": round(age, 6),
    }


@dataclass(frozen=True, slots=True)
class Price:
    """What a model's tokens cost, in money per MILLION tokens (what providers publish):
    ``Price(input=2.5, output=10.0, cached_input=1.25)``. ``cached_input`` (None: as
    ``input``) prices the input tokens a provider served from its prompt cache."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if name == "cached_input" and value is None:
                continue
            _amount(value, f"Price.{name} (per million tokens)", MAX_PRICE)

    def cost(self, input_tokens: int, output_tokens: int, cached: int = 0) -> float:
        """The cost of one call: ``cached`` of its ``input_tokens`` at the cached price."""
        cached = min(max(cached, 0), input_tokens)
        rate = self.input if self.cached_input is None else self.cached_input
        total = (input_tokens - cached) * self.input + cached * rate
        return (total + output_tokens * self.output) / 1_000_000


def check_prices(prices: Any) -> dict[str, Price]:
    """``tether.open(prices=...)``: model name -> Price (or a dict with the keys
    ``input``, ``output``, ``cached_input``), checked whole."""
    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise InvalidInput(
            f"prices maps a model name to tether.Price(input=..., output=...) per million "
            f"tokens, not {type(prices).__name__}"
        )
    out: dict[str, Price] = {}
    for model, price in prices.items():
        if not isinstance(model, str) or not model:
            raise InvalidInput(f"prices: a model name is a non-empty str, not {model!r}")
        if isinstance(price, Mapping):
            unknown = sorted(set(price) - {"input", "output", "cached_input"})
            if unknown:
                raise InvalidInput(
                    f"prices[{model!r}]: unknown key {unknown[0]!r}; a price has input, "
                    f"output and cached_input (per million tokens)"
                )
            try:
                price = Price(**price)
            except TypeError as e:
                raise InvalidInput(f"prices[{model!r}]: {e}") from None
        if not isinstance(price, Price):
            raise InvalidInput(
                f"prices[{model!r}] must be tether.Price(input=..., output=...), not {price!r}"
            )
        out[model] = price
    return out
