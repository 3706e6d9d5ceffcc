"""What one identity may see and do: the App through ``app.scoped(identity)``
(:mod:`tether.scoped`), with the server's own answers on top.

Every route goes through an :class:`Access`, never the App directly:

- a run of another tenant is NotFound, with the very message of an unknown id, which
  names neither the database nor the tenant (an attacker guessing ids learns nothing:
  404, never 403); the scoped view checks it before the role, so a viewer approving
  another tenant's run gets the 404 an unknown id gets;
- a role that may not act is Forbidden (403), recorded in the run's audit log by the
  scoped view before anything is done;
- the identity recorded for a decision is the token's name, never a field of the request;
- every act that goes through is recorded in the run's audit log too (``via: http``),
  beside what the act itself appends to the run's log.

Schedules belong to no tenant (their rows have none, and the runs they start have no
owner): a tenant's token sees none (an empty list; any name is NotFound, with the
message of an unknown name, which lists nothing), an identity of every tenant reads
them with any role, and pausing, resuming or deleting one needs an admin's (as ``tether
schedule``: they span tenants). Boards do carry a tenant (part of their stored key): a
tenant's token sees its tenant's boards alone; an identity of every tenant sees every
tenant's and names one with ``tenant`` (left out: the boards of no tenant).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from tether.app import App
from tether.context.boards import Board, BoardEntry
from tether.engine.executor import RunHandle
from tether.engine.revert import Reverted
from tether.errors import Forbidden, NotFound
from tether.model import inputs
from tether.model.events import Event
from tether.model.state import RunState
from tether.services import timetravel
from tether.services.identity import Identity
from tether.services.listing import InboxPage, RunPage
from tether.store import AuditRecord, RunRecord, UsageTotal
from tether.store.board_rows import BoardSummary
from tether.store.schedule_rows import ScheduleRecord

T = TypeVar("T")


def unknown_run(run_id: str) -> NotFound:
    """The one NotFound for a run id this identity may not see, known or not."""
    return NotFound(f"no run {run_id!r}: check the id (`GET /api/runs` lists the runs you can see)")


def unknown_schedule(name: str) -> NotFound:
    """The NotFound of a schedule name for a tenant's token (it sees no schedule)."""
    return NotFound(f"no schedule {name!r}: `GET /api/schedules` lists the schedules you can see")


def unknown_board(name: str, *, every_tenant: bool = False) -> NotFound:
    """The one NotFound for a board this identity may not see, or that has no change
    (an identity of every tenant is told how to name a tenant's)."""
    where = " of no tenant (a tenant's: add ?tenant=NAME)" if every_tenant else ""
    return NotFound(f"no board {name!r}{where}: `GET /api/boards` lists the boards you can see")


class Access:
    """``app`` as ``who`` may use it (see the module docstring)."""

    def __init__(self, app: App, who: Identity) -> None:
        self.app = app
        self.who = who
        self.scope = app.scoped(who)

    # -- checks ------------------------------------------------------------------

    def record(self, run_id: str) -> RunRecord:
        """The run's row, or the NotFound of an unknown id for another tenant's run."""
        inputs.lookup_id(run_id)
        try:
            return self.scope.record(run_id)
        except NotFound:
            raise unknown_run(run_id) from None

    def require(self, action: str) -> None:
        """Raise Forbidden (audited) unless ``who``'s role allows ``action``, which
        concerns no run (queues, workers)."""
        try:
            self.who.require(action)
        except Forbidden:
            self._audit(None, "access.refused", refused=action, role=self.who.role.label)
            raise

    def _audit(self, run_id: str | None, what: str, **detail: Any) -> None:
        text = json.dumps({"via": "http", **detail})
        now = self.app.clock.now()
        self.app.store.record_audit(run_id, what, text, actor=self.who.name, now=now)

    def act(self, action: str, run_id: str, do: Callable[[], T]) -> T:
        """``do()`` (a call of the scoped view, which checks the role and audits a
        refusal) once the run is visible; the act is audited when it went through."""
        self.record(run_id)
        done = do()
        self._audit(run_id, action)
        return done

    # -- reads ---------------------------------------------------------------------

    def get(self, run_id: str) -> tuple[RunRecord, RunState]:
        """The run's row and its folded state."""
        return self.record(run_id), self.scope.get(run_id)

    def events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        """At most ``limit`` events with seq > ``after``: one bounded read of the log."""
        self.record(run_id)
        return self.scope.events(run_id, after=after, upto=after + limit)

    def state(
        self, run_id: str, *, at: int | None, step: int | str | None, when: timetravel.When
    ) -> RunState:
        """The exact state at seq ``at`` or before/after ``step`` (the head: neither)."""
        self.record(run_id)
        return self.scope.state(run_id, at=at, step=step, when=when)

    def diff(self, a: str, b: str) -> timetravel.Diff:
        """What differs from run ``a``'s head to run ``b``'s."""
        self.record(a)
        self.record(b)
        return self.scope.diff(a, b)

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records."""
        self.record(run_id)
        return self.scope.audit(run_id)

    def runs(self, **filters: Any) -> RunPage:
        """A page of the runs ``who`` may see (its tenant's), filtered."""
        return self.scope.list_runs(**filters)

    def costs(self, **filters: Any) -> list[UsageTotal]:
        """Model usage per agent or session of the runs ``who`` may see."""
        return self.scope.costs(**filters)

    def inbox(self, *, limit: int, cursor: str | None) -> InboxPage:
        """A page of the runs of ``who``'s tenant waiting for a person."""
        return self.scope.inbox(limit=limit, cursor=cursor)

    # -- acts ----------------------------------------------------------------------

    def fork(self, run_id: str, **how: Any) -> str:
        """A new queued run branching off ``run_id`` (of the same tenant)."""
        return self.act("fork", run_id, lambda: self.scope.fork(run_id, **how))

    def decide(self, run_id: str, name: str, *, approve: bool, reason: str | None) -> None:
        """Approve or deny as ``who`` (its name is the recorded ``by``)."""
        decide = self.scope.approve if approve else self.scope.deny
        action = "approve" if approve else "deny"
        self.act(action, run_id, lambda: decide(run_id, name, reason=reason))

    def resolve(self, run_id: str, *, happened: bool, result: Any) -> None:
        """Settle the run's tool call in doubt as ``who``."""
        resolve = self.scope.resolve
        self.act("resolve", run_id, lambda: resolve(run_id, happened=happened, result=result))

    def signal(self, run_id: str, name: str, payload: Any) -> bool:
        """Send a signal from ``who``; whether it woke the run."""
        return self.act("signal", run_id, lambda: self.scope.signal(run_id, name, payload))

    def cancel(self, run_id: str, *, compensate: bool, reason: str | None) -> RunHandle:
        """Cancel the run as ``who``."""
        cancel = self.scope.cancel
        return self.act(
            "cancel", run_id, lambda: cancel(run_id, compensate=compensate, reason=reason)
        )

    def revert(
        self, run_id: str, *, step: int, reason: str | None, happened: bool | None
    ) -> Reverted:
        """Revert one effect of the run as ``who`` (its name is the recorded ``by``)."""
        revert = self.scope.revert
        return self.act(
            "revert", run_id, lambda: revert(run_id, step=step, reason=reason, happened=happened)
        )

    def retry(self, run_id: str) -> RunHandle:
        """Put a failed or blocked run back in its queue: the server never executes runs."""
        retry = self.scope.retry_run
        return self.act("retry", run_id, lambda: retry(run_id, in_queue=True))

    def raise_budget(self, run_id: str, *, add: dict[str, Any], reason: str | None) -> None:
        """Raise the budget of a run waiting on one, as ``who`` (the recorded ``by``)."""
        raise_ = self.scope.raise_budget
        self.act("budget", run_id, lambda: raise_(run_id, add=add, reason=reason))

    # -- schedules and boards (see the module docstring) ------------------------------

    def schedules(self) -> list[ScheduleRecord]:
        """The schedules ``who`` may see: every one, or none for a tenant's token."""
        self.require("read")
        return [] if self.who.tenant is not None else self.app.schedules()

    def schedule(self, name: str) -> ScheduleRecord:
        """The schedule ``name``, if ``who`` may see it (else the NotFound of a name)."""
        self.require("read")
        if self.who.tenant is not None:
            inputs.name(name, "schedule name")
            raise unknown_schedule(name)
        return self.app.get_schedule(name)

    def change_schedule(self, action: str, name: str) -> tuple[ScheduleRecord | None, bool]:
        """Pause, resume or delete ``name`` as ``who`` (an admin): the schedule after it
        (None once deleted) and whether it changed; audited."""
        self.schedule(name)  # a tenant's token: NotFound, before the role (as for runs)
        self.require("maintain")
        if action == "pause":
            changed = self.app.pause_schedule(name)
        elif action == "resume":
            changed = self.app.resume_schedule(name)
        else:
            changed = self.app.unschedule(name)
        self._audit(None, f"schedule.{action}", schedule=name, changed=changed)
        return (None if action == "delete" else self.app.get_schedule(name)), changed

    def boards(self, tenant: str | None) -> list[BoardSummary]:
        """The boards ``who`` sees (``tenant`` narrows an identity of every tenant; another
        tenant's, for a tenant's token, gives none)."""
        inputs.optional_name(tenant, "tenant")
        if self.who.tenant is not None and tenant not in (None, self.who.tenant):
            return []
        found = self.scope.boards()
        return found if tenant is None else [b for b in found if b.tenant == tenant]

    def board(self, name: str, tenant: str | None, *, exists: bool = True) -> Board:
        """The board ``name`` of ``who``'s tenant (an identity of every tenant: of
        ``tenant``, None for no tenant's), writes recorded under ``who``'s name;
        ``exists``: NotFound unless it has a change."""
        inputs.optional_name(tenant, "tenant")
        own = self.who.tenant
        if own is not None and tenant not in (None, own):
            inputs.name(name, "the board name")
            raise unknown_board(name)
        who = self.who if own is not None else Identity(self.who.name, self.who.role, tenant)
        board = self.app.scoped(who).board(name)
        if exists and not board.history(limit=1):
            raise unknown_board(name, every_tenant=own is None and tenant is None)
        return board

    def set_board_key(
        self, name: str, tenant: str | None, key: str, value: Any, expected: int | None
    ) -> BoardEntry:
        """Set ``key`` of the board (see :meth:`board`) as ``who``, with a compare-and-set
        when ``expected`` is given (VersionConflict otherwise); the version written."""
        board = self.board(name, tenant, exists=False)
        version = board.set(key, value, expected_version=expected)
        self._audit(None, "board.set", board=name, tenant=board.tenant, key=key, version=version)
        return board.history(key, after=version - 1, limit=1)[0]
