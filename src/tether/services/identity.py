"""Who acts: API tokens, the identities they stand for, and what each role may do.

A token is created by an admin (``tether token create NAME --role R [--tenant T]``,
``app.tokens.create``), shown once as plaintext and never stored: the tokens table keeps
the hex SHA-256 of the whole plaintext, so a copy of the database gives no usable token.
The plaintext is ``tether_<id>_<secret>``: ``id`` is 16 hex characters (public: the row's
key, and what ``tether token list`` shows), ``secret`` 32 random bytes from
:mod:`secrets` in URL-safe base64. A secret of 256 random bits cannot be guessed, so a fast
hash is the right one (a slow password hash would only slow every request); the prefix
makes a leaked token easy to find with ``grep`` (and by secret scanners).

:meth:`Tokens.verify` turns a presented token into an :class:`Identity` (its name, role and
tenant) or None: unknown, revoked, malformed or not even a string, it never raises on what
a caller sends. The stored hash is compared with :func:`hmac.compare_digest`.

Roles are ordered; each includes the ones before it:

========  =================================================================
viewer    read: runs, their state, events, history, diffs, audit, the inbox
approver  + decide: approve, deny, resolve an effect in doubt, send a signal
operator  + act on runs: cancel, retry, resume, fork, start, raise a budget, revert
admin     + manage tokens; see queues and workers; gc, import, worker (span tenants)
========  =================================================================

A token's **tenant** scopes everything it does to the runs of that tenant (a run's
``owner``); ``None`` means every tenant. Any role but admin may be limited to a tenant (a
tenant's viewer, approver or operator); an admin is never: managing tokens, queues and
workers spans tenants, so an admin token with a tenant is refused.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from tether.errors import Forbidden, InvalidInput
from tether.model import inputs
from tether.model.clock import Clock
from tether.store import Audit, Credentials, NewToken, TokenRecord

PREFIX = "tether_"
_TOKEN = re.compile(r"^tether_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
TOUCH_EVERY = 60.0  # seconds: last_used_at is written at most this often per token


class Role(IntEnum):
    """What a token may do; ordered, each role includes the ones before it."""

    VIEWER = 1
    APPROVER = 2
    OPERATOR = 3
    ADMIN = 4

    @property
    def label(self) -> str:
        """The role's name as stored and typed: ``viewer``, ``approver``…"""
        return self.name.lower()

    @classmethod
    def parse(cls, value: Role | str) -> Role:
        """A Role from itself or its label; InvalidInput naming the roles otherwise."""
        if isinstance(value, Role):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        labels = ", ".join(r.label for r in cls)
        raise InvalidInput(f"role must be one of {labels}; not {inputs.show(value)}")


# The least role of each action (tether.services.scoped checks them; the server names
# its routes' actions with these words).
ACTIONS: dict[str, Role] = {
    "read": Role.VIEWER,
    "approve": Role.APPROVER,
    "deny": Role.APPROVER,
    "resolve": Role.APPROVER,
    "signal": Role.APPROVER,
    "cancel": Role.OPERATOR,
    "retry": Role.OPERATOR,
    "resume": Role.OPERATOR,
    "fork": Role.OPERATOR,
    "budget": Role.OPERATOR,  # raise a run's budget
    "revert": Role.OPERATOR,  # undo one effect of a run (tether.engine.revert)
    "start": Role.OPERATOR,
    "boards": Role.OPERATOR,  # write a board (tether.context.boards); reading one is "read"
    "queues": Role.ADMIN,
    "workers": Role.ADMIN,
    "metrics": Role.ADMIN,  # GET /metrics names every tenant's agents, queues and workers
    "tokens": Role.ADMIN,
    "maintain": Role.ADMIN,  # gc, import, worker: commands that span tenants
}


_VERBS = {
    "tokens": "manage tokens",
    "queues": "see the queues",
    "workers": "see the workers",
    "metrics": "read the metrics",
    "maintain": "run commands that span tenants",
    "budget": "raise a budget",
    "boards": "write a board",
}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who acts: a token's name (recorded as ``by`` of its decisions), its role, and the
    tenant it is limited to (None: every tenant)."""

    name: str
    role: Role
    tenant: str | None = None

    def __post_init__(self) -> None:
        inputs.name(self.name, "identity name")
        object.__setattr__(self, "role", Role.parse(self.role))  # "viewer" is Role.VIEWER
        inputs.optional_name(self.tenant, "tenant")

    def may(self, action: str) -> bool:
        """Whether this identity's role allows ``action`` (a key of :data:`ACTIONS`)."""
        least = ACTIONS.get(action)
        if least is None:
            raise InvalidInput(f"no action {action!r}; the actions are {', '.join(ACTIONS)}")
        return self.role >= least

    def require(self, action: str, where: str = "") -> None:
        """Raise Forbidden unless this identity's role allows ``action``."""
        if not self.may(action):
            need = ACTIONS[action].label
            at = f" on {where}" if where else ""
            verb = _VERBS.get(action, action)
            raise Forbidden(
                f"{self.name} ({self.role.label}) may not {verb}{at}: that needs the {need} "
                f"role or higher; ask an admin for a token with it"
            )


def digest(plaintext: str) -> str:
    """The hex SHA-256 stored for a plaintext token."""
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def parse(plaintext: object) -> str | None:
    """The public id of a well-formed token, or None for anything else."""
    if not isinstance(plaintext, str) or len(plaintext) > 100:
        return None
    m = _TOKEN.match(plaintext)
    return m.group(1) if m else None


class Tokens:
    """The API tokens of a store: create, verify, revoke, list (see the module docstring).

    ``groups``: the app's approver group names, which no token may take as its name (a
    group's name is not an identity)."""

    def __init__(self, store: Credentials, audit: Audit, clock: Clock, groups: Iterable[str] = ()):
        self.store = store
        self.audit = audit
        self.clock = clock
        self.groups = frozenset(groups)

    def create(
        self, name: str, role: Role | str, tenant: str | None = None, *, by: str | None = None
    ) -> tuple[TokenRecord, str]:
        """Create a token; return its record and its plaintext, which is shown this once
        and stored nowhere. Raises InvalidInput for a bad name, role or tenant (an admin
        token cannot have a tenant; a name cannot be an approver group's), Conflict when
        a token (even a revoked one) has the name. Recorded in the audit log (``by``)."""
        inputs.name(name, "token name")
        if name in self.groups:
            raise InvalidInput(
                f"token name {name!r} is an approver group's name; a group is not an "
                f"identity: name the token after the person or service that holds it"
            )
        level = Role.parse(role)
        inputs.optional_name(tenant, "tenant")
        if level is Role.ADMIN and tenant is not None:
            raise InvalidInput(
                "an admin token cannot be limited to a tenant (tokens, queues and workers "
                "span tenants): leave out the tenant, or give an operator token for it"
            )
        token_id = secrets.token_hex(8)
        plaintext = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        new = NewToken(token_id, name, level.label, tenant, digest(plaintext))
        now = self.clock.now()
        record = self.store.create_token(new, now=now)
        detail = {"name": name, "role": level.label, "tenant": tenant, "id": token_id}
        self.audit.record_audit(None, "token.created", json.dumps(detail), actor=by, now=now)
        return record, plaintext

    def verify(self, plaintext: object) -> Identity | None:
        """The identity of a valid token; None for an unknown, revoked or malformed one,
        or for anything that is not a token at all (never raises on what it is given)."""
        token_id = parse(plaintext)
        if token_id is None:
            return None
        assert isinstance(plaintext, str)  # parse checked it
        record = self.store.get_token(token_id)
        if record is None or record.revoked_at is not None:
            return None
        if not hmac.compare_digest(record.hash, digest(plaintext)):
            return None
        if record.role.upper() not in Role.__members__:
            return None  # a role this tether does not know (a newer one's): no access
        now = self.clock.now()
        if record.last_used_at is None or now - record.last_used_at >= TOUCH_EVERY:
            self.store.touch_token(record.id, now=now)
        return Identity(record.name, Role.parse(record.role), record.tenant)

    def revoke(self, name: str, *, by: str | None = None) -> bool:
        """Revoke the token named ``name`` at once (verify refuses it from now on): True
        when this call revoked it, False when it was revoked already. NotFound for a name
        no token has. Recorded in the audit log."""
        inputs.name(name, "token name")
        now = self.clock.now()
        revoked = self.store.revoke_token(name, now=now)
        if revoked:
            detail = json.dumps({"name": name})
            self.audit.record_audit(None, "token.revoked", detail, actor=by, now=now)
        return revoked

    def list(self) -> builtins.list[TokenRecord]:
        """Every token, revoked ones included, oldest first (records hold the hash, never
        the plaintext; their repr shows no hash)."""
        return self.store.list_tokens()
