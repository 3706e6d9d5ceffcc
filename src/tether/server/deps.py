"""What every route is given: the App, and the caller as an :class:`Access`."""

from __future__ import annotations

from dataclasses import dataclass
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


def server(request: Request) -> Server:
    """The :class:`Server` of the API serving ``request``."""
    found: Server = request.app.state.tether
    return found


def access(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    _cookie: Annotated[str | None, Security(_COOKIE)],
) -> Access:
    """The caller (401 without a valid identity; 403 for a cookie without its CSRF)."""
    s = server(request)
    return Access(s.app, s.auth.identify(request))


Caller = Annotated[Access, Depends(access)]
ServerOf = Annotated[Server, Depends(server)]
