"""Tenants and identities on the App: ``app.scoped(identity)``, ``app.for_tenant(t)``.

A run's **tenant** is its ``owner``: given when it is created through a scoped view
(``app.for_tenant("acme").start(...)`` / ``.run(...)``) or by its session (a session's
owner is its tenant: ``app.session(id, owner="acme")``), and inherited by its forks.

A :class:`ScopedApp` is the App seen by one identity. Every read and every control on a
run of **another tenant** raises NotFound with the very message of an unknown id, and
writes nothing (not even an audit record in that run: it would say the run exists); the
lists (``runs``, ``list_runs``, ``inbox``) filter by tenant in SQL. Past the tenant check,
the identity's role must allow the action (:mod:`tether.services.identity`): a refusal
raises Forbidden and is recorded in the run's audit log. A decision is recorded under
the identity's name: a ``by`` that differs is refused (InvalidInput).

``app.scoped(identity)``: an identity a token vouched for (``app.tokens.verify``).
``app.for_tenant(tenant)``: the local operator (who can open the database can write it)
limited to one tenant: every role, and ``by`` is whoever they say (as without a scope).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from tether.context.artifacts import Artifacts
from tether.context.boards import Board
from tether.context.conversation import Session
from tether.context.memory import Memory
from tether.context.tenant_artifacts import TenantArtifacts
from tether.context.tenant_memory import TenantMemory
from tether.engine import births
from tether.engine.executor import RunHandle
from tether.engine.revert import Reverted
from tether.errors import Conflict, Forbidden, InvalidInput, NotFound
from tether.model import codec, inputs
from tether.model.budgets import Limits
from tether.model.durations import Duration
from tether.model.events import Event
from tether.model.state import RunState
from tether.model.workspace import FileChange
from tether.services import control, export, listing, timetravel
from tether.services.identity import Identity, Role, Tokens
from tether.services.listing import InboxPage, RunPage
from tether.services.queues import Start
from tether.store import AuditRecord, Effect, RunCount, RunRecord, UsageTotal
from tether.store.board_rows import BoardSummary

if TYPE_CHECKING:
    from tether.app import App

LOCAL = "local"  # the name of the local operator's identity (for_tenant)


class Tenancy:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    def scoped(self, identity: Identity) -> ScopedApp:
        """This app as ``identity`` sees it: its tenant's runs alone (another tenant's are
        NotFound), the actions its role allows (else Forbidden, audited), its decisions
        recorded under its name. For the server: ``app.scoped(app.tokens.verify(token))``."""
        if not isinstance(identity, Identity):
            raise InvalidInput(f"identity must be an Identity, not {inputs.show(identity)}")
        return ScopedApp(self._app(), identity, local=False)

    def for_tenant(self, tenant: str | None) -> ScopedApp:
        """This app limited to ``tenant``'s runs (None: every tenant's), for the local
        operator (every role; a decision's ``by`` is whoever the caller names, as on the
        App itself)."""
        inputs.optional_name(tenant, "tenant")
        return ScopedApp(self._app(), Identity(LOCAL, Role.ADMIN, tenant), local=True)

    @property
    def tokens(self) -> Tokens:
        """The API tokens of this store (see :mod:`tether.services.identity`)."""
        app = self._app()
        found: Tokens | None = getattr(self, "_tokens", None)
        if found is None:
            found = Tokens(app.store, app.store, app.clock, app.approver_groups)
            self._tokens = found
        return found

    def list_runs(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        queue: str | None = None,
        session: str | None = None,
        tenant: str | None = None,
        text: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        version: str | None = None,
        limit: int = listing.PAGE_DEFAULT,
        cursor: str | None = None,
    ) -> RunPage:
        """A page of runs, newest first, filtered (see :mod:`tether.services.listing`:
        ``text`` is a prefix of the run id or the agent, ``version`` the agent's version
        the runs recorded); ``cursor``: the previous page's ``next_cursor``."""
        filters = listing.check_filter(
            status=status,
            agent=agent,
            queue=queue,
            session=session,
            tenant=tenant,
            text=text,
            created_after=created_after,
            created_before=created_before,
            version=version,
        )
        return self._app()._reader.list_runs(filters, limit=limit, cursor=cursor)

    def count_runs(self, **filters: Any) -> list[RunCount]:
        """How many runs ``filters`` (those of :meth:`list_runs`) select, by agent, version
        and status: which versions still have runs in flight (docs/deploys.md)."""
        return self._app().store.run_counts(listing.check_filter(**filters))

    def inbox(
        self,
        *,
        tenant: str | None = None,
        limit: int = listing.PAGE_DEFAULT,
        cursor: str | None = None,
    ) -> InboxPage:
        """A page of the runs waiting for a person (approvals, tool calls in doubt), oldest
        first, each with what is to be decided (see :mod:`tether.services.listing`)."""
        return self._app()._reader.inbox(tenant=tenant, limit=limit, cursor=cursor)

    def _app(self) -> App:
        return self  # type: ignore[return-value]  # mixed into App alone


class ScopedApp:
    """The App as one identity sees it (see the module docstring). Get it from
    :meth:`tether.App.scoped` or :meth:`tether.App.for_tenant`."""

    def __init__(self, app: App, identity: Identity, *, local: bool) -> None:
        self.app = app
        self.identity = identity
        self.local = local  # the local operator: `by` is theirs to name

    @property
    def tenant(self) -> str | None:
        """The tenant this view is limited to (None: every tenant)."""
        return self.identity.tenant

    # -- the checks ---------------------------------------------------------

    def visible(self, run_id: str) -> RunRecord:
        """The run's row if this identity may know it exists; NotFound, with an unknown
        id's message, otherwise (another tenant's run)."""
        record = self.app.store.get_run(inputs.lookup_id(run_id))
        if self.tenant is not None and record.owner != self.tenant:
            raise NotFound(
                f"no run {run_id!r} in {self.app.store.where}; `tether runs` lists the runs"
            )
        return record

    def allow(self, action: str, run_id: str) -> RunRecord:
        """The run's row, if it is visible and this identity's role allows ``action``;
        a role that does not is refused (Forbidden) and recorded in the run's audit log."""
        record = self.visible(run_id)
        try:
            self.identity.require(action, f"run {run_id}")
        except Forbidden as e:
            self._audit(run_id, action, e)
            raise
        return record

    def by(self, by: str | None) -> str:
        """Who decides: the identity's name; ``by`` must be left out or be the same (the
        local operator names whoever decides, as on the App)."""
        if self.local:
            if by is None:
                raise InvalidInput(
                    "by is required: who takes the decision (--by NAME, or --token: a token "
                    "of its own), e.g. by='alice'"
                )
            return by
        if by is not None and by != self.identity.name:
            raise InvalidInput(
                f"by={by!r} differs from the token's identity {self.identity.name!r}: a "
                f"decision is recorded under the identity that takes it; leave by out"
            )
        return self.identity.name

    def _require(self, action: str) -> None:
        """Raise Forbidden unless the role allows ``action``, which concerns no one run (a
        list, a start): a refusal is kept in the audit log without a run."""
        try:
            self.identity.require(action)
        except Forbidden as e:
            self._audit(None, action, e)
            raise

    def _audit(self, run_id: str | None, action: str, refusal: Forbidden) -> None:
        detail = {"action": action, "role": self.identity.role.label, "why": str(refusal)}
        now = self.app.clock.now()
        store = self.app.store
        store.record_audit(
            run_id, "access.refused", codec.encode(detail), actor=self.identity.name, now=now
        )

    # -- reads ----------------------------------------------------------------

    def record(self, run_id: str) -> RunRecord:
        """The run's row (see :meth:`tether.App.record`)."""
        return self.allow("read", run_id)

    def load(self, run_id: str, *, upto: int | None = None) -> RunState:
        """The run's state at ``upto`` or its head (see :meth:`tether.App.load`)."""
        self.allow("read", run_id)
        return self.app.load(run_id, upto=upto)

    def get(self, run_id: str) -> RunState:
        """The run's current state (see :meth:`tether.App.get`)."""
        self.allow("read", run_id)
        return self.app.get(run_id)

    def events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        """The run's events in seq order (see :meth:`tether.App.events`)."""
        self.allow("read", run_id)
        return self.app.events(run_id, after=after, upto=upto)

    def history(self, run_id: str) -> timetravel.History:
        """The run's row, events and steps (see :meth:`tether.App.history`)."""
        self.allow("read", run_id)
        return self.app.history(run_id)

    def state(
        self,
        run_id: str,
        *,
        at: int | None = None,
        step: int | str | None = None,
        when: timetravel.When = "after",
    ) -> RunState:
        """The state at a point of the run (see :meth:`tether.App.state`)."""
        self.allow("read", run_id)
        return self.app.state(run_id, at=at, step=step, when=when)

    def diff(
        self, a: RunState | str, b: RunState | str, *, bookkeeping: bool = False
    ) -> timetravel.Diff:
        """What differs from ``a`` to ``b`` (see :meth:`tether.App.diff`); both runs must
        be visible."""
        for side in (a, b):
            self.allow("read", side.run_id if isinstance(side, RunState) else side)
        return self.app.diff(a, b, bookkeeping=bookkeeping)

    def workspace_diff(self, a: RunState | str, b: RunState | str) -> list[FileChange]:
        """The files that changed from ``a`` to ``b`` (see :meth:`tether.App.workspace_diff`);
        both runs must be visible."""
        for side in (a, b):
            self.allow("read", side.run_id if isinstance(side, RunState) else side)
        return self.app.workspace_diff(a, b)

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records (see :meth:`tether.App.audit`)."""
        self.allow("read", run_id)
        return self.app.audit(run_id)

    def effect(self, key: str) -> Effect | None:
        """The effects row of an idempotency key, if its run is visible (else None, as for
        a key never called)."""
        self._require("read")
        found = self.app.effect(key)
        if found is None:
            return None
        try:
            self.visible(found.run_id)
        except NotFound:
            return None
        return found

    def export_run(self, run_id: str, out: TextIO) -> int:
        """Write the run as ``tether-run`` JSON lines (see :meth:`tether.App.export_run`)."""
        self.allow("read", run_id)
        return export.export_run(self.app.store, run_id, out)

    def runs(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
        **filters: Any,
    ) -> list[RunRecord]:
        """This tenant's runs, newest first (as :meth:`tether.App.runs`: at most ``limit``,
        read a page at a time; ``filters``: the others of :meth:`list_runs`)."""
        inputs.integer(limit, "limit", low=1)
        out: list[RunRecord] = []
        cursor = None
        while len(out) < limit:
            size = min(limit - len(out), listing.PAGE_MAX)
            page = self.list_runs(status=status, agent=agent, limit=size, cursor=cursor, **filters)
            out += page.runs
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    def list_runs(self, *, tenant: str | None = None, **filters: Any) -> RunPage:
        """A page of this tenant's runs (as :meth:`tether.App.list_runs`; ``tenant`` only
        narrows an all-tenant identity: another tenant's gives an empty page)."""
        self._require("read")
        inputs.optional_name(tenant, "tenant")
        if self.tenant is not None:
            if tenant not in (None, self.tenant):
                return RunPage([], None)
            tenant = self.tenant
        return self.app.list_runs(tenant=tenant, **filters)

    def count_runs(self, **filters: Any) -> list[RunCount]:
        """This tenant's runs counted by agent, version and status (as ``App.count_runs``)."""
        self._require("read")
        if self.tenant is not None:
            filters["tenant"] = self.tenant
        return self.app.count_runs(**filters)

    def costs(self, *, by: str = "agent", **filters: Any) -> list[UsageTotal]:
        """Model usage per agent or session of this tenant's runs (as ``App.costs``)."""
        self._require("read")
        if self.tenant is not None:
            filters["tenant"] = self.tenant
        return self.app.costs(by=by, **filters)

    def inbox(self, *, limit: int = listing.PAGE_DEFAULT, cursor: str | None = None) -> InboxPage:
        """The runs of this tenant waiting for a person (as :meth:`tether.App.inbox`)."""
        self._require("read")
        return self.app.inbox(tenant=self.tenant, limit=limit, cursor=cursor)

    # -- controls ---------------------------------------------------------------

    def approve(
        self, run_id: str, name: str, *, reason: str | None = None, by: str | None = None
    ) -> None:
        """Approve the run's request ``name`` as this identity (see :meth:`tether.App.approve`)."""
        who = self.by(by)
        self.allow("approve", run_id)
        self.app.approve(run_id, name, by=who, reason=reason)

    def deny(
        self, run_id: str, name: str, *, reason: str | None = None, by: str | None = None
    ) -> None:
        """Deny the run's request ``name`` as this identity (see :meth:`tether.App.deny`)."""
        who = self.by(by)
        self.allow("deny", run_id)
        self.app.deny(run_id, name, by=who, reason=reason)

    def resolve(
        self,
        run_id: str,
        *,
        happened: bool,
        result: Any = control.NO_RESULT,
        by: str | None = None,
    ) -> None:
        """Settle the run's tool call in doubt (see :meth:`tether.App.resolve`)."""
        who = self.by(by)
        self.allow("resolve", run_id)
        self.app.resolve(run_id, happened=happened, by=who, result=result)

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, sender: str | None = None
    ) -> bool:
        """Send a signal to the run, from this identity (see :meth:`tether.App.signal`;
        the local operator names the sender, if any)."""
        who = sender if self.local else self.by(sender)
        self.allow("signal", run_id)
        return self.app.signal(run_id, name, payload, sender=who)

    def cancel(
        self,
        run_id: str,
        *,
        compensate: bool = False,
        reason: str | None = None,
        by: str | None = None,
    ) -> RunHandle:
        """Cancel the run (see :meth:`tether.App.cancel`)."""
        who = by if self.local else self.by(by)
        self.allow("cancel", run_id)
        return self.app.cancel(run_id, compensate=compensate, by=who, reason=reason)

    def revert(
        self,
        run_id: str,
        *,
        step: int,
        by: str | None = None,
        reason: str | None = None,
        happened: bool | None = None,
    ) -> Reverted:
        """Revert one effect of the run as this identity (see :meth:`tether.App.revert`)."""
        who = self.by(by)
        self.allow("revert", run_id)
        return self.app.revert(run_id, step=step, by=who, reason=reason, happened=happened)

    def raise_budget(
        self,
        run_id: str,
        *,
        by: str | None = None,
        add: Mapping[str, Any],
        reason: str | None = None,
    ) -> RunState:
        """Raise a run's budget, as this identity (see :meth:`tether.App.raise_budget`)."""
        who = self.by(by)
        self.allow("budget", run_id)
        return self.app.raise_budget(run_id, by=who, add=add, reason=reason)

    def retry_run(self, run_id: str, *, in_queue: bool | None = None) -> RunHandle:
        """Retry a failed or blocked run (see :meth:`tether.App.retry_run`)."""
        self.allow("retry", run_id)
        return self.app.retry_run(run_id, in_queue=in_queue)

    def resume(self, run_id: str) -> RunHandle:
        """Resume the run here (see :meth:`tether.App.resume`)."""
        self.allow("resume", run_id)
        return self.app.resume(run_id)

    def fork(
        self,
        run_id: str,
        *,
        step: int | str | None = None,
        at: int | None = None,
        when: timetravel.When = "after",
        input: dict[str, Any] | None = None,
        vars: dict[str, Any] | None = None,
        workspace: str | None = None,
    ) -> str:
        """A fork of the run, of the same tenant (see :meth:`tether.App.fork`)."""
        self.allow("fork", run_id)
        options: dict[str, Any] = {"input": input, "vars": vars, "workspace": workspace}
        return self.app.fork(run_id, step=step, at=at, when=when, **options)

    # -- new runs, sessions, memory and artifacts of this tenant -------------------

    @property
    def memory(self) -> Memory | TenantMemory:
        """This tenant's long-term memory (:mod:`tether.context.tenant_memory`: its own
        namespaces, invisible to other tenants); the app's whole memory for a view of
        every tenant."""
        if self.tenant is None:
            return self.app.memory
        return TenantMemory(self.app.memory, self.tenant)

    def board(self, name: str) -> Board:
        """This tenant's board ``name`` (another tenant's boards are never seen: see
        :meth:`tether.App.board`); reads need the role to read, writes the role to write
        boards (operator), and each change is recorded under this identity's name."""
        by = None if self.local else self.identity.name
        return Board(
            self.app.store, self.app.clock, name, tenant=self.tenant, by=by, guard=self._board
        )

    def boards(self) -> list[BoardSummary]:
        """The boards this identity sees: its tenant's (every tenant's for a view of every
        tenant), by tenant and name, each with its keys holding a value and last change."""
        self._require("read")
        return self.app.store.list_boards(self.tenant)

    def _board(self, action: str) -> None:
        self._require("read" if action == "read" else "boards")

    @property
    def artifacts(self) -> Artifacts | TenantArtifacts:
        """This tenant's artifacts (:mod:`tether.context.tenant_artifacts`: the ones it put,
        another tenant's digest is not found); the app's artifacts for a view of every
        tenant."""
        if self.tenant is None:
            return self.app.artifacts
        return TenantArtifacts(self.app.artifacts, self.app.store, self.tenant, self.app.clock)

    def session(self, session_id: str, **options: Any) -> Session:
        """Get or create this tenant's session ``session_id`` (see
        :meth:`tether.App.session`); another tenant's is NotFound."""
        self._require("start")
        found = self.app.store.get_session(inputs.name(session_id, "the session id"))
        if found is not None and self.tenant is not None and found.owner != self.tenant:
            raise NotFound(f"no session {session_id!r} in {self.app.store.where}")
        return self.app.session(session_id, owner=self.tenant, **options)

    def start(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        queue: str = "default",
        priority: int = 0,
        run_id: str | None = None,
        dedup_key: str | None = None,
        delay: Duration | None = None,
        concurrency_key: str | None = None,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueue a run of this tenant (see :meth:`tether.App.start`). A ``run_id`` or
        ``dedup_key`` held by another tenant's run raises Conflict (that run is not
        returned)."""
        self._require("start")
        options = Start(queue, priority, run_id, dedup_key, delay, concurrency_key, limits)
        rid = self.app._queues.enqueue(None, agent, args, kwargs, options, tenant=self.tenant)
        if self.tenant is not None and self.app.store.get_run(rid).owner != self.tenant:
            raise Conflict(
                f"run id or dedup key already taken by a run this identity cannot see; "
                f"choose another (queue {queue!r})"
            )
        return rid

    def run(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Create a run of this tenant and execute it inline (see :meth:`tether.App.run`)."""
        self._require("start")
        ex = self.app._executor
        d = self.app._registry.resolve(agent)
        births.outside_loop(d)
        return ex.continue_run(ex.create(d, args, kwargs, tenant=self.tenant, limits=limits))
