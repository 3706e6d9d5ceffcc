"""tether's errors as HTTP answers: ``{"error": {"type", "message"}}`` with a status that
says whose problem it is, and never a traceback in a response.

=====================================  ======  =========================================
error                                  status  why
=====================================  ======  =========================================
no identity, a bad or revoked token     401     ``Unauthorized``: log in or send a token
Forbidden, a missing CSRF header        403     the role may not act (audited)
NotFound (another tenant's run too)     404     the same body as an unknown id
InvalidInput, EncodeError, ValueError   422     the request's values (names the field)
bad JSON, a wrong type, a bad query     422     FastAPI's validation, in this shape
a body over the limit                   413     ``max_body`` bytes (default 1 MiB)
Conflict, InvalidState                  409     the run's state does not allow it now
VersionConflict                         409     a board key's compare-and-set: the error
                                                has the key's ``version`` now
DecisionRefused                         409     already decided, not waiting, not an
                                                approver of it (recorded in the audit log)
RunDamaged                              409     the run's log is not whole: not served
QueueFull                               429     the queue is at its max depth: later
StoreUnavailable                        503     the database: try again
anything else                           500     logged with its traceback, never shown
=====================================  ======  =========================================

DecisionRefused is 409 rather than 403 because it concerns the request's state (its
approvers, its earlier decision), not the role: a token allowed to approve got this far.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether import errors

log = logging.getLogger("tether.server")

STATUS: tuple[tuple[type[BaseException], int], ...] = (  # first match wins
    (errors.NotFound, 404),
    (errors.Forbidden, 403),
    (errors.RunDamaged, 409),
    (errors.StoreUnavailable, 503),
    (errors.QueueFull, 429),
    (errors.InvalidState, 409),
    (errors.Conflict, 409),
    (errors.InvalidInput, 422),
    (errors.EncodeError, 422),
    (ValueError, 422),
)  # a bare TypeError is a bug of ours, not bad input: 500 (logged)


class Unauthorized(Exception):
    """No valid identity came with the request (401)."""


class CsrfFailed(Exception):
    """A cookie session's unsafe request without its CSRF header (403)."""


def body(type_: str, message: str, **more: Any) -> dict[str, Any]:
    """The JSON of an error answer."""
    return {"error": {"type": type_, "message": message, **more}}


def answer(status: int, type_: str, message: str, **more: Any) -> JSONResponse:
    """An error answer; 401s say which scheme to use."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body(type_, message, **more), status_code=status, headers=headers)


def _status(e: BaseException) -> int:
    return next((code for kind, code in STATUS if isinstance(e, kind)), 500)


async def _tether(request: Request, e: Exception) -> JSONResponse:
    status = _status(e)
    if status == 500:
        return await _internal(request, e)
    more = {}
    if isinstance(e, errors.VersionConflict):  # what a compare-and-set retries with
        more = {"key": e.key, "expected": e.expected, "version": e.version}
    return answer(status, type(e).__name__, str(e), **more)


async def _internal(request: Request, e: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=e)
    return answer(500, "InternalError", "the server failed on this request; see its log")


async def _validation(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, RequestValidationError)
    problems = [
        {"where": ".".join(str(p) for p in err.get("loc", ())), "problem": err.get("msg", "")}
        for err in e.errors()
    ]
    text = "; ".join(f"{p['where']}: {p['problem']}" for p in problems) or "invalid request"
    return answer(422, "InvalidInput", text, problems=problems)


async def _http(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, HTTPException)
    if e.status_code == 400:  # a body FastAPI could not parse (not UTF-8): bad input, 422
        return answer(422, "InvalidInput", f"the request body is not JSON in UTF-8 ({e.detail})")
    names = {404: "NotFound", 405: "MethodNotAllowed", 413: "TooLarge"}
    return answer(e.status_code, names.get(e.status_code, "HTTPError"), str(e.detail))


async def _unauthorized(request: Request, e: Exception) -> JSONResponse:
    return answer(401, "Unauthorized", str(e))


async def _csrf(request: Request, e: Exception) -> JSONResponse:
    return answer(403, "CsrfFailed", str(e))


def install(api: FastAPI) -> None:
    """Route every error through these answers."""
    api.add_exception_handler(RequestValidationError, _validation)
    api.add_exception_handler(HTTPException, _http)
    api.add_exception_handler(Unauthorized, _unauthorized)
    api.add_exception_handler(CsrfFailed, _csrf)
    api.add_exception_handler(errors.TetherError, _tether)
    api.add_exception_handler(ValueError, _tether)
    api.add_exception_handler(Exception, _internal)


class OnceEach:
    """ASGI middleware: a query parameter given more than once is refused with 422. No
    route takes a list in its query, and a framework that keeps the last value would
    answer for a value the caller may not have meant (``?tenant=a&tenant=b``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            names = [k for k, _ in parse_qsl(scope["query_string"].decode("latin-1"), True)]
            twice = sorted({k for k in names if names.count(k) > 1})
            if twice:
                message = (
                    f"the query parameter {twice[0]!r} is given {names.count(twice[0])} "
                    f"times; give each parameter once"
                )
                await answer(422, "InvalidInput", message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413 before the
    route reads it (by its Content-Length, or as it streams in without one)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, f"the request body is over {self.limit} bytes")
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"the request body is over {self.limit} bytes (or its length is not a number)"
        await answer(413, "TooLarge", message)(scope, receive, send)
