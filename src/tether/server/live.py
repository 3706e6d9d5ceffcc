"""Live updates as server-sent events: a run's new events, and the run list's changes.

Each stream polls the store on a short interval (``poll`` seconds) with one bounded read
in a worker thread: no database connection is held while a stream waits, and a stream
costs nothing between reads. A stream ends when the client goes away, when the server
stops (``stopping``: ``tether serve`` sets it at shutdown, so no stream holds the server
up), or when its identity is no longer valid (checked every :data:`REVERIFY` seconds: a
revoked token, an expired session).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio.to_thread
import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse

from tether.model.status import RunStatus
from tether.server import views
from tether.server.deps import Caller, Server, server
from tether.server.errors import CsrfFailed, Unauthorized
from tether.server.schemas import ErrorBody

STREAM = {"description": "server-sent events", "content": {"text/event-stream": {}}}
router = APIRouter(
    prefix="/api",
    responses={
        200: STREAM,
        **{code: {"model": ErrorBody} for code in (401, 403, 404, 409, 503)},
    },
)
BATCH = 500  # events per read of a run's stream
KEEPALIVE = 15.0  # seconds: a comment line, so proxies keep the connection
REVERIFY = 15.0  # seconds between two checks that the stream's identity is still valid
MAX_SEQ = 2**62  # the largest seq a stream starts after


def _frame(kind: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


class _Watch:
    """When a stream must end: its client left, the server stops, its identity expired."""

    def __init__(self, request: Request, s: Server) -> None:
        self.request = request
        self.s = s
        self.checked = time.monotonic()

    async def idle(self) -> bool:
        """Wait one poll interval; False once the stream must end."""
        waited, s = 0.0, self.s
        while waited < s.poll:
            if s.stopping.is_set() or await self.request.is_disconnected():
                return False
            step = min(0.05, s.poll - waited)
            await asyncio.sleep(step)
            waited += step
        return not s.stopping.is_set() and await self._still_valid()

    async def _still_valid(self) -> bool:
        if time.monotonic() - self.checked < REVERIFY:
            return True
        self.checked = time.monotonic()
        try:
            await anyio.to_thread.run_sync(self.s.auth.identify, self.request)
        except (Unauthorized, CsrfFailed):
            return False
        return True


def _stream(s: Server, body: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(_counted(s, body), media_type="text/event-stream", headers=headers)


async def _counted(s: Server, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body``, counted in ``s.streams`` while it is open (it ends, or is cancelled when
    its client goes away)."""
    s.streams[0] += 1
    try:
        async for chunk in body:
            yield chunk
    finally:
        s.streams[0] -= 1


def _last_seq(last_event_id: str) -> int:
    """The seq a reconnecting browser's ``Last-Event-ID`` names (an ``id`` this stream sent):
    ASCII digits of at most the largest seq; else 422 (not a 500 from int() or the store)."""
    if not (last_event_id.isascii() and last_event_id.isdigit()) or int(last_event_id) > MAX_SEQ:
        raise RequestValidationError(
            [{"loc": ("header", "last-event-id"), "msg": "an event id this stream sent (its seq)"}]
        )
    return int(last_event_id)


@router.get("/runs/{run_id}/live", response_class=StreamingResponse)
async def run_events(
    request: Request,
    caller: Caller,
    run_id: str,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=30)] = None,
) -> StreamingResponse:
    """The run's events as they are appended (``event: run-event``, ``id``: its seq),
    from seq ``after`` or the ``Last-Event-ID`` a reconnecting browser sends."""
    s = server(request)
    watch = _Watch(request, s)
    await anyio.to_thread.run_sync(caller.record, run_id)  # 404 before the stream starts
    seq = after if not last_event_id else _last_seq(last_event_id)

    async def body() -> AsyncIterator[bytes]:
        nonlocal seq

        def read() -> list[Any]:
            return caller.events(run_id, after=seq, limit=BATCH)

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
            if not await watch.idle():
                return

    return _stream(s, body())


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
    watch = _Watch(request, s)
    filters = {"status": status and status.value, "agent": agent}
    await anyio.to_thread.run_sync(lambda: caller.runs(**filters, limit=1))  # 4xx before

    async def body() -> AsyncIterator[bytes]:
        seen: dict[str, tuple[str, float]] = {}
        while True:
            page = await anyio.to_thread.run_sync(lambda: caller.runs(**filters, limit=limit))
            for r in page.runs:
                if seen.get(r.id) != (r.status, r.updated_at):
                    yield _frame("run", views.summary(r).model_dump())
            seen = {r.id: (r.status, r.updated_at) for r in page.runs}  # the page alone
            if not await watch.idle():
                return

    return _stream(s, body())
