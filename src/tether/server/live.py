"""Live updates as server-sent events: a run's new events, and the run list's changes.

Each stream polls the store on a short interval (``poll`` seconds) with one bounded read
in a worker thread: no database connection is held while a stream waits, and a stream
costs nothing between reads. A stream ends when the client goes away or the server stops
(``stopping``: ``tether serve`` sets it at shutdown, so no stream holds the server up).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio.to_thread
import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from tether.model.status import RunStatus
from tether.server import views
from tether.server.deps import Caller, Server, server
from tether.server.listing import RunQuery, runs_page

router = APIRouter(prefix="/api")
BATCH = 500  # events per read of a run's stream
KEEPALIVE = 15.0  # seconds: a comment line, so proxies keep the connection


def _frame(kind: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


async def _idle(request: Request, s: Server) -> bool:
    """Wait one poll interval; False once the client left or the server stops."""
    waited = 0.0
    while waited < s.poll:
        if s.stopping.is_set() or await request.is_disconnected():
            return False
        step = min(0.05, s.poll - waited)
        await asyncio.sleep(step)
        waited += step
    return not s.stopping.is_set()


def _stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


@router.get("/runs/{run_id}/live", response_class=StreamingResponse)
async def run_events(
    request: Request,
    caller: Caller,
    run_id: str,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=30)] = None,
) -> StreamingResponse:
    """The run's events as they are appended (``event: run-event``, ``id``: its seq),
    from seq ``after`` or the ``Last-Event-ID`` a reconnecting browser sends."""
    s = server(request)
    await anyio.to_thread.run_sync(caller.record, run_id)  # 404 before the stream starts
    seq = int(last_event_id) if last_event_id and last_event_id.isdigit() else after

    async def body() -> AsyncIterator[bytes]:
        nonlocal seq
        read: Callable[[], list[Any]] = lambda: caller.events(run_id, after=seq, limit=BATCH)
        quiet = 0.0
        while True:
            found = await anyio.to_thread.run_sync(read)
            for e in found:
                yield _frame("run-event", views.event(e).model_dump(), e.seq)
                seq = e.seq
            if len(found) == BATCH:
                continue
            quiet = 0.0 if found else quiet + s.poll
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield b": keepalive\n\n"
            if not await _idle(request, s):
                return

    return _stream(body())


@router.get("/live/runs", response_class=StreamingResponse)
async def run_list(
    request: Request,
    caller: Caller,
    status: RunStatus | None = None,
    agent: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> StreamingResponse:
    """The first page of the run list (these filters) as it changes: ``event: run`` with
    a run's summary when it appears or its status changes."""
    s = server(request)
    store, tenant = caller.app.store, caller.who.tenant
    query = RunQuery(status=status and status.value, agent=agent)
    await anyio.to_thread.run_sync(lambda: runs_page(store, query, tenant, limit=1, cursor=None))

    async def body() -> AsyncIterator[bytes]:
        seen: dict[str, tuple[str, float]] = {}
        while True:
            page = await anyio.to_thread.run_sync(
                lambda: runs_page(store, query, tenant, limit=limit, cursor=None)
            )
            for r in page.runs:
                if seen.get(r.id) != (r.status, r.updated_at):
                    yield _frame("run", views.summary(r).model_dump())
            seen = {r.id: (r.status, r.updated_at) for r in page.runs}  # the page alone
            if not await _idle(request, s):
                return

    return _stream(body())
