"""Who sends a request: an API token, or a browser session made from one.

- ``Authorization: Bearer tether_…``: the token is verified on every request
  (``app.tokens.verify``); a revoked one stops working at once.
- ``POST /api/login`` with a token answers with a session cookie (HttpOnly,
  SameSite=Strict, Path=/, ``Secure`` when served over https) and a CSRF token. The cookie
  holds the token's public id and an expiry, signed with HMAC-SHA256 under the server's
  secret; it never holds the token. Every request with it looks the token up again (a
  revoked token ends its sessions). Every unsafe method (POST, PUT, PATCH, DELETE) sent
  with the cookie must carry the CSRF token in ``X-CSRF-Token``: a page of another site can
  make the browser send the cookie, never read the token. ``POST /api/logout`` clears it.

The secret is ``session_secret`` (or ``TETHER_SESSION_SECRET``), shared by every server
of one database for sessions to work across them; left out, each server process draws
one, and its sessions end when it stops.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass

import orjson
from fastapi import Request

from tether.app import App
from tether.server.errors import CsrfFailed, Unauthorized
from tether.services import identity
from tether.services.identity import Identity, Role

COOKIE = "tether_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
NO_IDENTITY = (
    "this API needs an identity: send `Authorization: Bearer <token>` (a token from "
    "`tether token create NAME --role viewer`), or log in with POST /api/login"
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    """A browser session: the cookie's value, its CSRF token and when it ends."""

    cookie: str
    csrf: str
    expires: float


class Sessions:
    """Signed session cookies (see the module docstring); ``ttl`` in seconds."""

    def __init__(self, secret: bytes | str | None, ttl: float) -> None:
        secret = secret or os.environ.get("TETHER_SESSION_SECRET") or secrets.token_bytes(32)
        self.key = secret.encode() if isinstance(secret, str) else secret
        self.ttl = ttl

    def _sign(self, purpose: str, text: str) -> str:
        return _b64(hmac.new(self.key, f"{purpose}:{text}".encode(), hashlib.sha256).digest())

    def open(self, token_id: str) -> Session:
        """A new session for the token ``token_id``."""
        expires = time.time() + self.ttl
        payload = _b64(orjson.dumps({"t": token_id, "e": expires, "n": secrets.token_hex(8)}))
        return Session(
            f"{payload}.{self._sign('session', payload)}", self._sign("csrf", payload), expires
        )

    def token_id(self, cookie: str) -> str | None:
        """The token id of a cookie this server signed and that has not expired, or None."""
        payload, _, mac = cookie.partition(".")
        if not hmac.compare_digest(mac.encode(), self._sign("session", payload).encode()):
            return None
        try:
            data = orjson.loads(_unb64(payload))
        except (ValueError, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("e"), float):
            return None
        token = data.get("t")
        return token if isinstance(token, str) and data["e"] > time.time() else None

    def csrf_ok(self, cookie: str, sent: str | None) -> bool:
        """Whether ``sent`` is the CSRF token of the session ``cookie``."""
        payload = cookie.partition(".")[0]
        return sent is not None and hmac.compare_digest(
            sent.encode(), self._sign("csrf", payload).encode()
        )

    def csrf_of(self, cookie: str) -> str:
        """The CSRF token of a valid session cookie (``GET /api/me`` gives it back)."""
        return self._sign("csrf", cookie.partition(".")[0])


class Authenticator:
    """A request's :class:`Identity`, from its bearer token or its session cookie."""

    def __init__(self, app: App, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    def bearer(self, request: Request) -> str | None:
        """The bearer token of the request, if it sends an Authorization header."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("the Authorization header must be `Bearer <token>`")
        return token.strip()

    def identify(self, request: Request) -> Identity:
        """The identity of the request (raises Unauthorized or CsrfFailed)."""
        token = self.bearer(request)
        if token is not None:
            who = self.app.tokens.verify(token)
            if who is None:
                raise Unauthorized("the token is not valid (unknown, revoked or mistyped)")
            return who
        cookie = request.cookies.get(COOKIE)
        if cookie is None:
            raise Unauthorized(NO_IDENTITY)
        who = self.from_session(cookie)
        if request.method not in SAFE and not self.sessions.csrf_ok(
            cookie, request.headers.get(CSRF_HEADER)
        ):
            raise CsrfFailed(
                f"a request with the session cookie that changes something needs the "
                f"{CSRF_HEADER} header: the csrf_token POST /api/login (or GET /api/me) gave"
            )
        return who

    def from_session(self, cookie: str) -> Identity:
        """The identity of a session cookie whose token is still valid."""
        token_id = self.sessions.token_id(cookie)
        record = None if token_id is None else self.app.store.get_token(token_id)
        if record is None or record.revoked_at is not None:
            raise Unauthorized("the session expired or its token was revoked: log in again")
        if record.role.upper() not in Role.__members__:
            raise Unauthorized("the session's token has a role this server does not know")
        return Identity(record.name, Role.parse(record.role), record.tenant)

    def login(self, token: str) -> tuple[Identity, Session]:
        """A session for a valid token (Unauthorized otherwise)."""
        who = self.app.tokens.verify(token)
        if who is None:
            raise Unauthorized("the token is not valid (unknown, revoked or mistyped)")
        token_id = identity.parse(token)
        assert token_id is not None  # verify checked the shape
        return who, self.sessions.open(token_id)
