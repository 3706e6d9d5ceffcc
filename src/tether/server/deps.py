"""What every route is given: the App, and the caller as an :class:`Access`."""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Event
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from tether.app import App
from tether.server.access import Access
from tether.server.auth import COOKIE, Authenticator

# declared for /openapi.json (clients and fuzzers read the schemes there); the
# Authenticator reads the headers itself, so its errors are this API's
_BEARER = HTTPBearer(auto_error=False, description="an API token: tether token create")
_COOKIE = APIKeyCookie(name=COOKIE, auto_error=False, description="POST /api/login")


@dataclass(frozen=True, slots=True)
class Server:
    """The state one server shares between requests."""

    app: App
    auth: Authenticator
    stopping: Event  # set at shutdown: live streams end
    poll: float  # seconds between two reads of a live stream
    streams: list[int] = field(default_factory=lambda: [0])  # live streams open now
    reader: App | None = None  # on a read-only URL (a replica): serves the GET requests


def server(request: Request) -> Server:
    """The :class:`Server` of the API serving ``request``."""
    found: Server = request.app.state.tether
    return found


def access(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    _cookie: Annotated[str | None, Security(_COOKIE)],
) -> Access:
    """The caller (401 without a valid identity; 403 for a cookie without its CSRF), on
    the server's read-only App for a GET when it has one (the identity is the primary's)."""
    s = server(request)
    identity = s.auth.identify(request)
    reads = s.reader is not None and request.method in ("GET", "HEAD")
    return Access(s.reader if reads and s.reader is not None else s.app, identity)


Caller = Annotated[Access, Depends(access)]
ServerOf = Annotated[Server, Depends(server)]
