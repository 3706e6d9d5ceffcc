"""``tether token create|list|revoke``: the API tokens of a database (see
:mod:`tether.services.identity` and docs/auth.md).

``create`` prints the token on standard output, alone on its line (so that
``TOKEN=$(tether token create …)`` captures it), and on standard error that it is shown
this once: only its hash is stored. ``list`` never shows a token or its hash. With a token
of its own (``--token``), the command needs an admin's; without one, the local operator
manages them (who can open the database can write it).
"""

from __future__ import annotations

import argparse
import json
import sys

from tether.cli import format as fmt
from tether.cli.context import Command, CommandError, Context
from tether.services.identity import Role
from tether.store import TokenRecord

ACTIONS = ("create", "list", "revoke")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="create, list or revoke")
    parser.add_argument("name", nargs="?", help="the token's name: the identity it stands for")
    parser.add_argument(
        "--role",
        choices=[r.label for r in Role],
        help="create: what it may do (viewer < approver < operator < admin)",
    )
    parser.add_argument("--json", action="store_true", help="list: one JSON object per token")


def _token(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    by = None
    if ctx.token is not None:  # acting as a token: an admin's alone manages tokens
        identity = app.tokens.verify(ctx.token)
        if identity is None:
            ctx.view()  # raises the invalid token's error
        else:
            identity.require("tokens")
            by = identity.name
    if args.action != "list" and not args.name:
        raise CommandError(f"tether token {args.action} needs the token's NAME", 2)
    if args.action == "create":
        return _create(args, ctx, by)
    if args.action == "revoke":
        return _revoke(args, ctx, by)
    return _list(args, ctx)


def _create(args: argparse.Namespace, ctx: Context, by: str | None) -> int:
    if args.role is None:
        raise CommandError("tether token create needs --role viewer|approver|operator|admin", 2)
    record, plaintext = ctx.app().tokens.create(args.name, args.role, ctx.tenant, by=by)
    scope = f"tenant {record.tenant!r}" if record.tenant else "every tenant"
    print(f"created token {record.name!r} ({record.role}, {scope}):", file=sys.stderr)
    ctx.print(plaintext)
    print(
        "This token will not be shown again (only its hash is stored): keep it in a secret "
        "store now. Use it as --token, $TETHER_TOKEN, or Authorization: Bearer.",
        file=sys.stderr,
    )
    return 0


def _revoke(args: argparse.Namespace, ctx: Context, by: str | None) -> int:
    if ctx.app().tokens.revoke(args.name, by=by):
        ctx.print(f"revoked token {args.name!r}: it is refused from now on")
    else:
        ctx.print(f"token {args.name!r} was already revoked")
    return 0


def _row(t: TokenRecord) -> dict[str, object]:
    """What list shows of a token: never the token, never its hash."""
    return {
        "name": t.name,
        "role": t.role,
        "tenant": t.tenant,
        "id": t.id,
        "created_at": t.created_at,
        "last_used_at": t.last_used_at,
        "revoked_at": t.revoked_at,
    }


def _list(args: argparse.Namespace, ctx: Context) -> int:
    tokens = ctx.app().tokens.list()
    if ctx.tenant is not None:
        tokens = [t for t in tokens if t.tenant == ctx.tenant]
    rows = [_row(t) for t in tokens]
    if args.json:
        for row in rows:
            ctx.print(json.dumps(row))
    elif not rows:
        ctx.print("no tokens" + (f" of tenant {ctx.tenant!r}" if ctx.tenant else ""))
    else:
        ctx.print(fmt.tokens_table(rows))
    return 0


COMMANDS = (
    Command(
        "token",
        "create, list or revoke API tokens",
        _arguments,
        _token,
        "`tether token create NAME --role ROLE [--tenant T]` prints a new token once (only "
        "its hash is stored); `tether token list` shows names, roles, tenants and use, never "
        "a token; `tether token revoke NAME` refuses it from now on. Roles: viewer (read), "
        "approver (+ approve, deny, resolve, signal), operator (+ cancel, retry, resume, "
        "fork), admin (+ tokens, queues, workers; never limited to a tenant).",
    ),
)
