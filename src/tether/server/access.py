"""What one identity may see and do: the App seen through a token's role and tenant.

Every route goes through an :class:`Access`, never the App directly, so that one place
decides, for every run it names:

- a run of another tenant is NotFound, with the very message of an unknown id (an attacker
  guessing ids learns nothing: 404, never 403);
- a role that may not act is Forbidden (403), recorded in the run's audit log before
  anything is done (:data:`tether.services.identity.ACTIONS` gives each action's role);
- the identity recorded for a decision is the token's name, never a field of the request.

Visibility is checked before the role, so a viewer that tries to approve another tenant's
run gets the 404 an unknown id gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from tether.app import App
from tether.engine.executor import RunHandle
from tether.errors import Forbidden, NotFound
from tether.model import inputs
from tether.model.events import Event
from tether.model.state import RunState
from tether.services import timetravel
from tether.services.identity import Identity
from tether.store import RunRecord

T = TypeVar("T")


def unknown_run(run_id: str) -> NotFound:
    """The one NotFound for a run id this identity may not see, known or not."""
    return NotFound(f"no run {run_id!r}: check the id (`GET /api/runs` lists the runs you can see)")


class Access:
    """``app`` as ``who`` may use it (see the module docstring)."""

    def __init__(self, app: App, who: Identity) -> None:
        self.app = app
        self.who = who

    # -- checks ------------------------------------------------------------------

    def visible(self, record: RunRecord) -> bool:
        """Whether ``who``'s tenant holds the run (no tenant: every run)."""
        return self.who.tenant is None or record.owner == self.who.tenant

    def record(self, run_id: str) -> RunRecord:
        """The run's row, or the NotFound of an unknown id for another tenant's run."""
        inputs.lookup_id(run_id)
        try:
            record = self.app.record(run_id)
        except NotFound:
            raise unknown_run(run_id) from None
        if not self.visible(record):
            raise unknown_run(run_id)
        return record

    def require(self, action: str, run_id: str | None = None) -> None:
        """Raise Forbidden (audited against the run) unless ``who``'s role allows ``action``."""
        try:
            self.who.require(action, f"run {run_id}" if run_id else "")
        except Forbidden:
            self._audit(run_id, f"{action}.forbidden", role=self.who.role.label)
            raise

    def _audit(self, run_id: str | None, action: str, **detail: Any) -> None:
        text = json.dumps({"via": "http", **detail})
        now = self.app.clock.now()
        self.app.store.record_audit(run_id, action, text, actor=self.who.name, now=now)

    def on_run(self, action: str, run_id: str, do: Callable[[], T]) -> T:
        """``do()`` once the run is visible and ``action`` allowed."""
        self.record(run_id)
        self.require(action, run_id)
        done = do()
        self._audit(run_id, action)  # the act itself is in the run's log too
        return done

    # -- reads ---------------------------------------------------------------------

    def get(self, run_id: str) -> tuple[RunRecord, RunState]:
        """The run's row and its folded state."""
        record = self.record(run_id)
        return record, self.app.get(run_id)

    def events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        """At most ``limit`` events with seq > ``after``: one bounded read of the log."""
        self.record(run_id)
        return self.app.store.read_events(run_id, after=after, upto=after + limit)

    def state(
        self, run_id: str, *, at: int | None, step: int | str | None, when: timetravel.When
    ) -> RunState:
        """The exact state at seq ``at`` or before/after ``step`` (the head: neither)."""
        self.record(run_id)
        return self.app.state(run_id, at=at, step=step, when=when)

    def diff(self, a: str, b: str) -> timetravel.Diff:
        """What differs from run ``a``'s head to run ``b``'s."""
        self.record(a)
        self.record(b)
        return self.app.diff(a, b)

    def audit(self, run_id: str) -> list[Any]:
        """The run's audit records."""
        self.record(run_id)
        return self.app.audit(run_id)

    # -- acts ----------------------------------------------------------------------

    def fork(self, run_id: str, **how: Any) -> str:
        """A new queued run branching off ``run_id`` (of the same tenant)."""
        return self.on_run("fork", run_id, lambda: self.app.fork(run_id, **how))

    def decide(self, run_id: str, name: str, *, approve: bool, reason: str | None) -> None:
        """Approve or deny as ``who`` (its name is the recorded ``by``)."""
        act = self.app.approve if approve else self.app.deny
        action = "approve" if approve else "deny"
        self.on_run(action, run_id, lambda: act(run_id, name, by=self.who.name, reason=reason))

    def resolve(self, run_id: str, *, happened: bool, result: Any) -> None:
        """Settle the run's tool call in doubt as ``who``."""
        self.on_run(
            "resolve",
            run_id,
            lambda: self.app.resolve(run_id, happened=happened, by=self.who.name, result=result),
        )

    def signal(self, run_id: str, name: str, payload: Any) -> bool:
        """Send a signal from ``who``; whether it woke the run."""
        send = self.app.signal
        return self.on_run(
            "signal", run_id, lambda: send(run_id, name, payload, sender=self.who.name)
        )

    def cancel(self, run_id: str, *, compensate: bool, reason: str | None) -> RunHandle:
        """Cancel the run as ``who``."""
        cancel = self.app.cancel
        return self.on_run(
            "cancel",
            run_id,
            lambda: cancel(run_id, compensate=compensate, by=self.who.name, reason=reason),
        )

    def retry(self, run_id: str) -> RunHandle:
        """Put a failed or blocked run back in its queue: the server never executes runs."""
        retry = self.app.retry_run
        return self.on_run("retry", run_id, lambda: retry(run_id, in_queue=True))
