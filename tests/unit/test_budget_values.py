"""tether.Limits and tether.Price as values: what they refuse (saying which field), how
the agent's and the run's limits combine, how a raise adds, and what a call costs."""

from __future__ import annotations

import math

import pytest

import tether
from tether.model import budgets
from tether.model.steps import Usage

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"max_steps": -1}, "Limits.max_steps must be between 0 and"),
        ({"max_model_calls": 10**13}, "Limits.max_model_calls must be between 0 and"),
        ({"max_tokens": 2.5}, "Limits.max_tokens must be a whole number, not float"),
        ({"max_steps": True}, "Limits.max_steps must be a whole number, not bool"),
        ({"max_cost": math.nan}, "Limits.max_cost must be a finite number"),
        ({"max_cost": math.inf}, "Limits.max_cost must be a finite number"),
        ({"max_cost": -0.5}, "Limits.max_cost must be a finite number between 0"),
        ({"max_cost": "1.5"}, "Limits.max_cost must be a number, not str"),
        ({"max_duration": -3}, "Limits.max_duration must not be negative"),
        ({"max_duration": "forever"}, "Limits.max_duration"),
        ({"on_exceeded": "later"}, "Limits.on_exceeded is 'wait' or 'fail'"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(fields: dict[str, object], match: str) -> None:
    with pytest.raises(tether.InvalidInput, match=match):
        tether.Limits(**fields)  # type: ignore[arg-type]


def test_a_duration_is_kept_in_seconds_and_the_data_leaves_out_unset_limits() -> None:
    limits = tether.Limits(max_duration="10m", max_cost=2)
    assert limits.max_duration == 600.0 and limits.max_cost == 2
    assert limits.data() == {"max_cost": 2.0, "max_duration": 600.0, "on_exceeded": "wait"}
    assert tether.Limits.of(limits.data()) == limits


def test_the_smaller_limit_holds_and_a_raise_adds_to_it() -> None:
    agent = tether.Limits(max_steps=10, max_cost=1.0, on_exceeded="fail")
    run = tether.Limits(max_steps=4, max_tokens=500)
    both = budgets.combine(agent, run, {"max_steps": 3})
    assert both is not None
    assert (both.max_steps, both.max_cost, both.max_tokens) == (7, 1.0, 500)
    assert both.on_exceeded == "fail"  # a run's default "wait" does not soften its agent's
    assert budgets.combine(None, None, {}) is None


def test_which_limit_a_call_would_pass() -> None:
    limits = tether.Limits(max_steps=5, max_model_calls=2, max_tokens=100, max_duration=60)
    spent = Usage(input_tokens=40, output_tokens=10, calls=2)
    assert budgets.exceeded(limits, "step", 5, spent, 0.0) is None
    assert budgets.exceeded(limits, "step", 6, spent, 0.0) == "steps"
    assert budgets.exceeded(limits, "llm", 3, spent, 0.0) == "model_calls"
    assert budgets.exceeded(limits, "step", 3, Usage(input_tokens=100), 0.0) == "tokens"
    assert budgets.exceeded(limits, "step", 3, Usage(), 60.0) == "duration"


@pytest.mark.parametrize(
    ("add", "match"),
    [
        ({"steps": -1}, "the raise of steps must be between 0 and"),
        ({"cost": math.nan}, "the raise of cost must be a finite number"),
        ({"tokens": 10**20}, "the raise of tokens must be between 0 and"),
        ({"wallclock": 5}, "unknown limit 'wallclock'"),
        ({}, "at least one limit"),
    ],
)
def test_bad_raises_are_refused(add: dict[str, object], match: str) -> None:
    with pytest.raises(tether.InvalidInput, match=match):
        budgets.parse_additions(add)


def test_a_raise_takes_short_names_and_durations() -> None:
    assert budgets.parse_additions({"steps": 2, "duration": "5m", "max_cost": 1}) == {
        "max_steps": 2,
        "max_duration": 300.0,
        "max_cost": 1.0,
    }


def test_a_price_is_per_million_tokens_with_cached_input() -> None:
    price = tether.Price(input=2.0, output=8.0, cached_input=0.5)
    assert price.cost(1_000_000, 0) == pytest.approx(2.0)
    assert price.cost(1000, 500, cached=400) == pytest.approx((600 * 2 + 400 * 0.5 + 500 * 8) / 1e6)
    assert tether.Price(input=1.0, output=1.0).cost(10, 0, cached=10) == pytest.approx(1e-5)


@pytest.mark.parametrize(
    ("prices", "match"),
    [
        ({"m": {"input": 1, "output": 2, "ouptut": 3}}, "prices\\['m'\\]: unknown key 'ouptut'"),
        ({"m": {"input": -1, "output": 2}}, "Price.input \\(per million tokens\\)"),
        ({"m": {"input": 1, "output": math.nan}}, "Price.output"),
        ({"m": {"input": 1}}, "prices\\['m'\\]"),
        ({"m": 3.0}, "prices\\['m'\\] must be tether.Price"),
        ({"": tether.Price(1, 1)}, "a model name is a non-empty str"),
        ([("m", 1)], "prices maps a model name"),
    ],
)
def test_bad_prices_are_refused(prices: object, match: str) -> None:
    with pytest.raises(tether.InvalidInput, match=match):
        budgets.check_prices(prices)


def test_limits_must_be_limits() -> None:
    with pytest.raises(tether.InvalidInput, match=r"takes tether\.Limits"):
        budgets.check_limits({"max_steps": 3}, "limits")
