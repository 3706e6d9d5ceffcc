"""The ASGI application: :func:`create_app` (see the package docstring)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from tether.app import App
from tether.server import acts, boards, errors, live, metrics, reads, schedules, schemas
from tether.server.auth import Authenticator, Sessions
from tether.server.deps import Server
from tether.version import __version__

MAX_BODY = 1 << 20  # bytes: a decision, a fork's vars or a signal's payload fits many times
ERROR_REF = "#/components/schemas/ErrorBody"
# the page runs its own script and style alone: no inline script, nothing from elsewhere
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SESSION_TTL = 8 * 3600.0  # seconds: a working day; log in again after

STATIC = Path(__file__).with_name("static")  # the web inspector: shipped in the wheel


def create_app(
    app: App,
    *,
    session_secret: bytes | str | None = None,
    session_ttl: float = SESSION_TTL,
    max_body: int = MAX_BODY,
    poll: float = 0.5,
    reader: App | None = None,
) -> FastAPI:
    """The HTTP API over ``app``, as an ASGI application (FastAPI).

    Serve it with any ASGI server (``tether serve`` uses uvicorn) or mount it in your own
    app (``outer.mount("/tether", create_app(app))``). ``session_secret`` signs browser
    sessions (default: ``TETHER_SESSION_SECRET``, else one per process); ``session_ttl``:
    seconds a session lasts; ``max_body``: the largest request body, in bytes; ``poll``:
    seconds between two reads of a live stream. ``.state.tether.stopping`` (a
    threading.Event) ends the live streams: set it when the server shuts down.
    ``reader``: an App on a read-only URL (a replica: ``tether.open(url, read_only=True)``)
    that serves the GET requests; tokens are verified, and everything else done, on ``app``.
    """
    if max_body < 1 or session_ttl <= 0 or poll <= 0:
        raise ValueError("max_body, session_ttl and poll must be positive")
    api = FastAPI(
        title="tether",
        version=__version__,
        description="Durable runs of LLM agents: read them, decide their approvals, act.",
        docs_url=None,  # the Swagger and ReDoc pages load scripts from a CDN: not served
        redoc_url=None,
    )
    sessions = Sessions(session_secret, session_ttl)
    api.state.tether = Server(
        app, Authenticator(app, sessions), threading.Event(), poll, reader=reader
    )
    errors.install(api)
    api.include_router(reads.router)
    api.include_router(acts.router)
    api.include_router(schedules.router)
    api.include_router(boards.router)
    api.include_router(live.router)
    api.include_router(metrics.router)
    api.add_middleware(errors.BodyLimit, limit=max_body)
    api.add_middleware(errors.OnceEach)

    api.mount("/static", StaticFiles(directory=STATIC), name="static")

    @api.get("/", response_class=FileResponse, include_in_schema=False)
    def inspector() -> FileResponse:
        """The web inspector's page; its script reads the same API with the session
        cookie (no token is ever kept in the page)."""
        headers = {"Cache-Control": "no-store", "Content-Security-Policy": CSP}
        return FileResponse(STATIC / "index.html", headers=headers)

    api.openapi = lambda: _schema(api)  # type: ignore[method-assign]
    return api


def _schema(api: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the errors this API really answers: every 422 (and the
    401 and 413 any route may give) is ``{"error": {"type", "message"}}``."""
    if api.openapi_schema is None:
        doc = get_openapi(
            title=api.title, version=api.version, description=api.description, routes=api.routes
        )
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        components["ErrorBody"] = schemas.ErrorBody.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        components.update(components["ErrorBody"].pop("$defs", {}))
        error = {"content": {"application/json": {"schema": {"$ref": ERROR_REF}}}}
        for path in doc["paths"].values():
            for operation in path.values():
                answers = operation.setdefault("responses", {})
                for code, what in (("401", "no valid identity"), ("413", "body too large")):
                    answers.setdefault(code, {"description": what, **error})
                answers["422"] = {"description": "a value the API does not take", **error}
        api.openapi_schema = doc
    return api.openapi_schema
