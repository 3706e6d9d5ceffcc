"""Raising a run's budget, and what runs cost.

A run that reached one of its limits with ``on_exceeded="wait"`` waits (``waiting_for``
``budget:LIMIT``; see :mod:`tether.engine.limits`). :meth:`Budgets.raise_budget` appends
``budget.raised`` (what was added, by whom, why) and makes it queued again: a worker of
its queue, or ``tether resume``, in any process, goes on from the call it stopped before,
under the raised limits. Only a run waiting on its budget can be raised: a finished run
cannot go on (fork it), and a run executing elsewhere folds its limits when it starts.

:func:`run_cost` gives one run's usage, in all and per model call; :func:`totals` sums
the usage of many runs by agent or by session (what the metrics read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.engine.states import States
from tether.errors import Conflict, InvalidInput, InvalidState
from tether.model import budgets, inputs
from tether.model import events as ev
from tether.model.state import RunState
from tether.model.status import FINISHED, RunStatus
from tether.services import listing
from tether.services.control import Control
from tether.store import Store, UsageTotal


class Budgets:
    """Raise the budget of runs waiting on one (see the module docstring)."""

    def __init__(self, states: States, control: Control) -> None:
        self.states = states
        self.control = control

    def raise_budget(
        self, run_id: str, *, by: str, add: Mapping[str, Any], reason: str | None = None
    ) -> RunState:
        """Add ``add`` (``{"steps": 10, "cost": 1.5}``; names: steps, model_calls, tokens,
        cost, duration) to the limits of run ``run_id``, which waits on its budget, as
        ``by``; return its state. InvalidInput for an unknown name or a negative, nan or
        huge amount; NotFound for an unknown run; InvalidState for a run not waiting on
        its budget (finished, running, waiting for something else)."""
        inputs.lookup_id(run_id)
        inputs.name(by, "by")
        inputs.text(reason, "reason")
        added = budgets.parse_additions(add)
        state = self.states.load(run_id)
        _check_waiting(state)
        data: dict[str, Any] = {"add": added, "by": by}
        if reason is not None:
            data["reason"] = reason
        try:
            self.control.append_outside(state, ev.BUDGET_RAISED, data)
        except Conflict:
            raise InvalidState(
                f"run {run_id} changed while its budget was being raised (someone else raised "
                f"it, or cancelled it); `tether show {run_id}` tells, then try again"
            ) from None
        return self.states.load(run_id)


def _check_waiting(state: RunState) -> None:
    rid, status = state.run_id, state.status
    if status in FINISHED:
        raise InvalidState(
            f"run {rid} is {status}: a finished run's budget cannot be raised; `tether fork "
            f"{rid}` starts a new run from its log, with new limits"
        )
    waiting = state.waiting or {}
    if status != RunStatus.WAITING or waiting.get("kind") != "budget":
        doing = f"waiting for {waiting.get('kind')}" if status == RunStatus.WAITING else status
        raise InvalidState(
            f"run {rid} is not waiting on its budget (it is {doing}); a budget is raised when "
            f"a run stops at one of its limits"
        )


@dataclass(frozen=True, slots=True)
class Cost:
    """Usage summed over some model calls: ``cost`` (in the prices' unit), tokens, calls."""

    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    runs: int = 0

    def data(self) -> dict[str, Any]:
        """As plain data (the server's JSON)."""
        return {
            "cost": self.cost,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "calls": self.calls,
            "runs": self.runs,
        }


FILTERS = (
    "status",
    "agent",
    "queue",
    "session",
    "tenant",
    "text",
    "created_after",
    "created_before",
)


def totals(store: Store, *, by: str = "agent", **filters: Any) -> list[UsageTotal]:
    """Model usage (cost, tokens, calls, runs) per agent (``by="agent"``) or per session
    (``by="session"``) of the runs ``filters`` select (those of ``App.list_runs``:
    status, agent, queue, session, tenant, text, created_after, created_before),
    costliest first: one query (see Store.usage_totals). What the metrics read."""
    if by not in ("agent", "session"):
        raise InvalidInput(f"totals are by 'agent' or by 'session', not {inputs.show(by)}")
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise InvalidInput(f"no filter {unknown[0]!r}; the filters: {', '.join(FILTERS)}")
    return store.usage_totals(listing.check_filter(**filters), by=by)


def run_cost(state: RunState) -> dict[str, Any]:
    """A run's usage as plain data: the run's total and each model call's (position,
    name, cost, tokens), and its budget (limits, raises, the limit reached)."""
    u = state.usage
    steps = [
        {
            "position": s.position,
            "name": s.name,
            "cost": s.usage.cost,
            "input_tokens": s.usage.input_tokens,
            "output_tokens": s.usage.output_tokens,
        }
        for s in state.steps
        if s.usage is not None
    ]
    total = Cost(u.cost, u.input_tokens, u.output_tokens, u.calls, 1).data()
    return {"total": total, "steps": steps, "budget": dict(state.budget or {}) or None}


def describe(state: RunState) -> str | None:
    """A run's budget in a line (``tether show``): the limit reached and what was used,
    or the raises; None for a run without limits."""
    budget = state.budget
    if not budget:
        return None
    added = budget.get("added") or {}
    raised = ", ".join(f"{_short(k)} +{v:g}" for k, v in added.items())
    hit = budget.get("exceeded")
    if hit:
        used = (hit.get("used") or {}).get(hit["limit"])
        text = (
            f"budget exceeded: {hit['limit']} reached ({used:g} of at most {hit['max']:g}) "
            f"before position {hit['position']}"
        )
        if hit.get("on_exceeded") == "wait":
            text += f"; `tether budget {state.run_id} --add {hit['limit']}=N` raises it"
        return text + (f" (raised before: {raised})" if raised else "")
    return f"raised: {raised}" if raised else "limits set at the start"


def _short(field_: str) -> str:
    return field_.removeprefix("max_")
