"""The read routes: the run list, a run, its events and its state at a point, diffs, the
approvals inbox, queues and workers (any role but the last two: admin)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from tether.model.status import RunStatus
from tether.server import schemas, views
from tether.server.auth import COOKIE
from tether.server.deps import Caller, server
from tether.services.workers import describe

QUEUED_COUNTED = 10_000  # queued runs read to count a queue's depth (one bounded read)

router = APIRouter(
    prefix="/api",
    responses={code: {"model": schemas.ErrorBody} for code in (401, 403, 404, 409, 503)},
)

Name = Annotated[str, Query(min_length=1, max_length=200)]


@router.get("/me", response_model=schemas.Me)
def me(caller: Caller, request: Request) -> schemas.Me:
    """The caller's identity: its token's name, role and tenant; with a session cookie,
    its CSRF token too (a reloaded page gets it back here)."""
    who, csrf = caller.who, None
    cookie = request.cookies.get(COOKIE)
    if cookie is not None and "authorization" not in request.headers:
        csrf = server(request).auth.sessions.csrf_of(cookie)
    return schemas.Me(name=who.name, role=who.role.label, tenant=who.tenant, csrf_token=csrf)


@router.get("/runs", response_model=schemas.RunList)
def runs(
    caller: Caller,
    status: RunStatus | None = None,  # an enum in /openapi.json
    agent: Name | None = None,
    version: Name | None = None,
    queue: Name | None = None,
    session: Name | None = None,
    text: Name | None = None,
    created_after: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    created_before: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> schemas.RunList:
    """Runs newest first, filtered (``version``: of their agent's), a page at a time
    (``cursor``: the previous page's ``next_cursor``). A tenant's token sees its
    tenant's runs alone."""
    page = caller.runs(
        status=status and status.value,
        agent=agent,
        version=version,
        queue=queue,
        session=session,
        text=text,
        created_after=created_after,
        created_before=created_before,
        limit=limit,
        cursor=cursor,
    )
    return schemas.RunList(runs=[views.summary(r) for r in page.runs], next_cursor=page.next_cursor)


@router.get("/costs", response_model=list[schemas.CostTotal])
def costs(
    caller: Caller,
    by: Literal["agent", "session"] = "agent",
    agent: Name | None = None,
    session: Name | None = None,
    created_after: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    created_before: Annotated[float | None, Query(ge=0, le=1e11)] = None,
) -> list[schemas.CostTotal]:
    """Model usage (cost, tokens, calls, runs) per agent or per session of the runs the
    filters select, costliest first. A tenant's token sums its tenant's runs alone."""
    found = caller.costs(
        by=by,
        agent=agent,
        session=session,
        created_after=created_after,
        created_before=created_before,
    )
    return [schemas.CostTotal(**dataclasses.asdict(t)) for t in found]


@router.get("/runs/{run_id}", response_model=schemas.RunPage)
def run(
    caller: Caller,
    run_id: str,
    steps_after: Annotated[int, Query(ge=0, le=10**9)] = 0,
    steps_limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> schemas.RunPage:
    """A run's row and folded state: the five layers, usage, lineage; its steps a page at
    a time (positions ``steps_after + 1 …``)."""
    record, state = caller.get(run_id)
    return schemas.RunPage(
        run=views.summary(record),
        state=views.head(state),
        steps=views.steps(state, steps_after, steps_limit),
        steps_total=len(state.steps),
        lineage=views.lineage(state),
    )


@router.get("/runs/{run_id}/events", response_model=schemas.EventPage)
def events(
    caller: Caller,
    run_id: str,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> schemas.EventPage:
    """The run's events with seq > ``after``, at most ``limit`` (one bounded read)."""
    found = caller.events(run_id, after=after, limit=limit)
    last = found[-1].seq if len(found) == limit else None
    return schemas.EventPage(events=[views.event(e) for e in found], next_after=last)


@router.get("/runs/{run_id}/state", response_model=schemas.StateOut)
def state(
    caller: Caller,
    run_id: str,
    seq: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    step: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    when: Literal["before", "after"] = "after",
) -> schemas.StateOut:
    """The exact state at ``seq``, or before/after ``step`` (a position or a name); the
    head when neither is given."""
    where: int | str | None = int(step) if step is not None and step.isdigit() else step
    s = caller.state(run_id, at=seq, step=where, when=when)
    return schemas.StateOut(run_id=s.run_id, seq=s.seq, state=views.state(s))


@router.get("/runs/{run_id}/audit", response_model=list[schemas.JsonObject])
def audit(caller: Caller, run_id: str) -> list[schemas.JsonObject]:
    """The run's audit records: refusals, and every act taken through this API."""
    return [
        {"at": a.at, "actor": a.actor, "action": a.action, "detail": a.detail}
        for a in caller.audit(run_id)
    ]


@router.get("/diff", response_model=schemas.DiffOut)
def diff(caller: Caller, a: Name, b: Name) -> schemas.DiffOut:
    """What differs from run ``a``'s state to run ``b``'s (e.g. a fork and its parent)."""
    return schemas.DiffOut(**views.codec_json(caller.diff(a, b).to_data()))


@router.get("/approvals", response_model=schemas.Inbox)
def approvals(
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> schemas.Inbox:
    """The inbox: runs waiting for an approval or for a tool call in doubt to be
    resolved, oldest first, each with what it waits for (payload, approvers)."""
    page = caller.inbox(limit=limit, cursor=cursor)
    return schemas.Inbox(
        items=[views.inbox_item(i) for i in page.items], next_cursor=page.next_cursor
    )


@router.get("/queues", response_model=list[schemas.QueueOut])
def queues(caller: Caller) -> list[schemas.QueueOut]:
    """The queues workers claim from or runs wait in, with how many runs are queued in
    each (counted up to :data:`QUEUED_COUNTED` in all: ``queued_at_least`` says the
    count stopped there) and the workers that claim from each (admin)."""
    caller.require("queues")
    store = caller.app.store
    depth: dict[str, int] = {}
    queued = store.list_runs(status=RunStatus.QUEUED, limit=QUEUED_COUNTED)
    for r in queued:
        depth[r.queue or "default"] = depth.get(r.queue or "default", 0) + 1
    claimed: dict[str, list[str]] = {}
    for w in store.list_workers():
        for q in w.queues:
            claimed.setdefault(q, []).append(w.id)
    names = sorted(set(depth) | set(claimed))
    return [
        schemas.QueueOut(
            name=n,
            queued=depth.get(n, 0),
            queued_at_least=len(queued) == QUEUED_COUNTED,
            workers=claimed.get(n, []),
        )
        for n in names
    ]


@router.get("/workers", response_model=list[schemas.WorkerOut])
def workers(caller: Caller) -> list[schemas.WorkerOut]:
    """The registered workers, their heartbeats and the runs they lease (admin)."""
    caller.require("workers")
    app = caller.app
    now = app.clock.now()
    leases: dict[str, list[str]] = {}
    for r in app.runs(status=RunStatus.RUNNING, limit=10_000):
        if r.lease_owner and (r.lease_expires or 0) >= now:
            leases.setdefault(r.lease_owner, []).append(r.id)
    rows = describe(app.store.list_workers(), leases, now)
    return [schemas.WorkerOut(**row) for row in rows]
