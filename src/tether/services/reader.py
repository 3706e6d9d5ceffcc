"""Reads: a run's state, its events, the runs (and their pages, and the inbox), an
effect's row and a run's audit records.

Every read checks its arguments first (:mod:`tether.model.inputs`), so a bad id or
bound is refused with a message that names it, never passed to the database.
"""

from __future__ import annotations

from tether.engine.states import States
from tether.model import inputs
from tether.model.events import Event
from tether.model.state import RunState
from tether.services import listing
from tether.services.listing import InboxPage, RunPage
from tether.store import AuditRecord, Effect, RunFilter, RunRecord


class Reader:
    """Reads of ``states``' store (states: the runs' states, with their snapshot cache)."""

    def __init__(self, states: States) -> None:
        self.states = states
        self.store = states.store

    def get(self, run_id: str) -> RunState:
        """The run's current state (see :meth:`tether.App.get`)."""
        return self.states.load(run_id)

    def events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        """The run's events in seq order. Raises NotFound for an unknown run."""
        inputs.integer(after, "after", low=0)
        if upto is not None:
            inputs.integer(upto, "upto", low=0)
        self.store.get_run(inputs.lookup_id(run_id))
        return self.store.read_events(run_id, after=after, upto=upto)

    def record(self, run_id: str) -> RunRecord:
        """The run's row (see :meth:`tether.App.record`)."""
        return self.store.get_run(inputs.lookup_id(run_id))

    def runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first (at most ``limit``; a status no run has matches none)."""
        inputs.optional_name(status, "status")
        inputs.optional_name(agent, "agent")
        inputs.integer(limit, "limit", low=1)
        return self.store.list_runs(status=status, agent=agent, limit=limit)

    def list_runs(self, filters: RunFilter, *, limit: int, cursor: str | None) -> RunPage:
        """A page of the runs matching ``filters`` (see :mod:`tether.services.listing`)."""
        return listing.list_runs(self.states, filters, limit=limit, cursor=cursor)

    def inbox(self, *, tenant: str | None, limit: int, cursor: str | None) -> InboxPage:
        """A page of the runs waiting for a person (see :mod:`tether.services.listing`)."""
        return listing.inbox(self.states, tenant=tenant, limit=limit, cursor=cursor)

    def effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key (None if never called)."""
        return self.store.get_effect(inputs.lookup_id(key, "key"))

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records (refused decisions and the like)."""
        self.store.get_run(inputs.lookup_id(run_id))
        return self.store.read_audit(run_id)
