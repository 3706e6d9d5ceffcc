"""The App's settings and budgets (a mixin of :class:`tether.App`): the retry policy,
approval policy, inline sleeps, snapshots and model prices, and raising a run's budget
(see :mod:`tether.services.budgets`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from tether.engine.executor import Executor
from tether.engine.policy import Policy
from tether.engine.retry import Retry
from tether.engine.states import States
from tether.engine.workspace import Blobs, Workspaces
from tether.model.budgets import Price, check_prices
from tether.model.state import RunState
from tether.model.workspace import Workspace, workspace_of
from tether.services import budgets
from tether.services.budgets import Budgets
from tether.services.control import Control
from tether.store import Store, UsageTotal


class Settings:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    _executor: Executor
    _states: States
    _control: Control
    store: Store

    @functools.cached_property
    def _budgets(self) -> Budgets:
        return Budgets(self._states, self._control)

    @property
    def retry(self) -> Retry:
        """The retry policy of steps that name none (``tether.open(retry=...)``)."""
        return self._executor.retry

    @retry.setter
    def retry(self, value: Retry) -> None:
        self._executor.retry = value

    @property
    def policy(self) -> Policy:
        """Which tools need a human's approval (``tether.open(policy=...)``)."""
        return self._executor.policy

    @policy.setter
    def policy(self, value: Policy) -> None:
        if not isinstance(value, Policy):
            raise TypeError(f"app.policy takes a tether.Policy, not {value!r}")
        value.check_tools(self._executor.registry.tools)  # a rule naming no tool of the app
        self._executor.policy = value

    @property
    def inline_sleep_max(self) -> float:
        """The longest ``run.sleep`` that ``app.run`` waits out in its process."""
        return self._executor.inline_sleep_max

    @inline_sleep_max.setter
    def inline_sleep_max(self, value: float) -> None:
        self._executor.inline_sleep_max = value

    @property
    def snapshot_every(self) -> int:
        """A load that folds this many events or more caches a snapshot."""
        return self._states.snapshot_every

    @snapshot_every.setter
    def snapshot_every(self, value: int) -> None:
        self._states.snapshot_every = value

    @property
    def connection_budget(self) -> dict[str, int] | None:
        """The most connections this App's store holds at once, by use, and their
        ``total`` (PostgreSQL: see docs/postgres.md); None for SQLite (one file)."""
        budget: dict[str, int] | None = getattr(self.store, "connection_budget", None)
        return budget

    @property
    def prices(self) -> dict[str, Price]:
        """Model name -> :class:`tether.Price` (per million tokens): a model call whose
        result reports no cost is priced with its model's (``tether.open(prices=...)``)."""
        return dict(self._executor.prices)

    @prices.setter
    def prices(self, value: Mapping[str, Price | Mapping[str, float]] | None) -> None:
        self._executor.prices = check_prices(value)

    @property
    def workspace(self) -> Workspace | None:
        """The directory (a :class:`tether.Workspace`) of the agents that name none
        (``tether.open(workspace=...)``); None: only those that name one have one."""
        ws = self._executor.workspaces
        return ws.default if ws is not None else None

    @workspace.setter
    def workspace(self, value: Workspace | str | None) -> None:
        default = workspace_of(value, "app.workspace")
        self._executor.workspaces = Workspaces(default, self._workspace_blobs)

    def _workspace_blobs(self) -> Blobs:
        """Where file contents go: the App's artifact store (the database by default)."""
        arts = self.artifacts  # type: ignore[attr-defined]
        return Blobs(self.store, arts.backend, self.clock)  # type: ignore[attr-defined]

    def raise_budget(
        self, run_id: str, *, by: str, add: Mapping[str, Any], reason: str | None = None
    ) -> RunState:
        """Raise the limits of a run waiting on its budget: ``add={"steps": 10, "cost":
        1.5}`` (steps, model_calls, tokens, cost, duration), recorded with ``by`` and
        ``reason``; the run is queued again (a worker or ``resume`` goes on). See
        :mod:`tether.services.budgets` for what is refused."""
        return self._budgets.raise_budget(run_id, by=by, add=add, reason=reason)

    def costs(self, *, by: str = "agent", **filters: Any) -> list[UsageTotal]:
        """Model usage (cost, tokens, calls, runs) per agent or per session (``by``) of the
        runs ``filters`` select (as :meth:`list_runs`'s), costliest first; one query."""
        return budgets.totals(self._states.store, by=by, **filters)
