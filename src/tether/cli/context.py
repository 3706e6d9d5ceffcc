"""What every command shares: :class:`Command`, the :class:`Context` it runs with (the
database and the App chosen by ``--db``, ``--app`` and ``--code``), :class:`CommandError`
and the global options.

``--app pkg.module:app`` (or ``path/to/file.py:app``) names the App to use, exactly as
its module configured it: its agents and tools, policy, approver groups, queues, lease
ttl and retry, on its own database. ``--db`` (default ``$TETHER_DB``) names the database
without ``--app`` (default ``tether.db`` in the current directory); with ``--app`` it
may only name the App's own database (else a usage error). What a run's row records
about its code is never imported unless the operator allows it: ``--app`` (the modules
of its agents and tools) or ``--code MODULE`` / ``$TETHER_CODE`` (see
:mod:`tether.engine.registry`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

import tether
from tether.cli.arguments import code_modules
from tether.engine.registry import CODE_ENV, parse_modules
from tether.scoped import ScopedApp
from tether.services.identity import Role
from tether.store.sqlite import sqlite_path
from tether.store.urls import is_postgres, redact

DEFAULT_DB = "tether.db"
DB_ENV = "TETHER_DB"
TENANT_ENV = "TETHER_TENANT"
TOKEN_ENV = "TETHER_TOKEN"
READ_URL_ENV = "TETHER_READ_URL"

if TYPE_CHECKING:  # the type of `parser.add_subparsers()` (generic only in typeshed)
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    Subparsers = argparse._SubParsersAction


class CommandError(tether.TetherError):
    """A failure of the command line itself (bad --app, no database); ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Command:
    """One ``tether`` subcommand: its name, one line of help, ``add_arguments(parser)``,
    ``run(args, ctx) -> int`` (the exit code) and a longer description."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Context], int]
    description: str = ""


class Context:
    """What a command runs with: the database and agents chosen by the global options."""

    def __init__(
        self,
        db: str | None,
        app_ref: str | None,
        out: TextIO | None = None,
        code: Iterable[str] = (),
    ) -> None:
        self.explicit_db = db  # --db as given (the demo ignores $TETHER_DB)
        self.app_ref = app_ref
        self.out = out or sys.stdout  # looked up now: a test may have replaced it
        self.code = frozenset(code)  # --code / $TETHER_CODE: modules runs may name
        self.log_format = "text"  # --log-format / $TETHER_LOG_FORMAT: text or json
        self.given_tenant: str | None = None  # --tenant as given
        self.given_token: str | None = None  # --token as given
        self._app: tether.App | None = None
        self._view: ScopedApp | None = None
        self.given_read_url: str | None = None  # --read-url as given
        self._reader: tether.App | None = None  # the App on the read URL, opened once
        self._read_view: ScopedApp | None = None

    @property
    def tenant(self) -> str | None:
        """The tenant named by --tenant or $TETHER_TENANT (None: neither)."""
        return self.given_tenant or os.environ.get(TENANT_ENV) or None

    @property
    def token(self) -> str | None:
        """The API token given by --token or $TETHER_TOKEN (None: neither)."""
        return self.given_token or os.environ.get(TOKEN_ENV) or None

    def view(self) -> ScopedApp:
        """The App as this command may see it: with a token, as the token's identity (its
        tenant, its role; a --tenant can only narrow an all-tenant token); without one, as
        the local operator, limited to --tenant if given (see :mod:`tether.scoped`)."""
        if self._view is None:
            app = self.app()
            if self.token is None:
                self._view = app.for_tenant(self.tenant)
            else:
                self._view = app.scoped(self._identity(app))
        return self._view

    @property
    def read_url(self) -> str | None:
        """The read-only URL (a replica) named by --read-url or $TETHER_READ_URL."""
        return self.given_read_url or os.environ.get(READ_URL_ENV) or None

    def read_view(self) -> ScopedApp:
        """The App for a command that only reads: on the read URL (a replica, opened
        ``read_only``) when one is given, else :meth:`view`. A token is still verified on
        the primary (verifying records its use), and scopes the replica's view alike."""
        url = self.read_url
        if url is None:
            return self.view()
        if self._read_view is None:
            reader = self.reader(url)
            if self.token is None:
                self._read_view = reader.for_tenant(self.tenant)
            else:
                self._read_view = reader.scoped(self._identity(self.app()))
        return self._read_view

    def reader(self, url: str) -> tether.App:
        """The App on the read URL ``url``, read-only, opened once."""
        if self._reader is None:
            if not is_postgres(url):
                raise CommandError(
                    f"--read-url (or ${READ_URL_ENV}) is a PostgreSQL replica's URL, not "
                    f"{redact(url)!r}: a SQLite database is one file, read where it is; drop "
                    f"--read-url",
                    2,
                )
            self._reader = tether.open(url, code=self.code, read_only=True)
        return self._reader

    def _identity(self, app: tether.App) -> tether.Identity:
        identity = app.tokens.verify(self.token)
        if identity is None:
            raise CommandError(
                f"the token (--token or ${TOKEN_ENV}) is not valid: unknown, revoked or "
                f"malformed; `tether token list` shows the tokens, an admin creates one"
            )
        tenant = self.tenant
        if tenant is not None and identity.tenant not in (None, tenant):
            raise CommandError(
                f"--tenant {tenant!r} (or ${TENANT_ENV}) is not the token's tenant "
                f"({identity.tenant!r}): a token sees its own tenant alone",
                2,
            )
        return dataclasses.replace(identity, tenant=identity.tenant or tenant)

    def require_admin(self, what: str, *, create: bool = False) -> tether.App:
        """The App (``create``: as :meth:`app`), for a command that spans tenants
        (``what``): refused with --tenant; with a token, only an admin's."""
        if self.tenant is not None:
            raise CommandError(
                f"{what} spans every tenant: it cannot be limited to one (drop --tenant, "
                f"unset ${TENANT_ENV})",
                2,
            )
        if self.token is not None:
            identity = self._identity(self.app())
            if identity.role < Role.ADMIN:
                identity.require("workers" if what == "workers" else "maintain", f"`tether {what}`")
        return self.app(create=create)

    @property
    def db(self) -> str | None:
        """The database named by --db or $TETHER_DB (None: neither)."""
        return self.explicit_db or os.environ.get(DB_ENV) or None

    def app(self, *, create: bool = False) -> tether.App:
        """The App on the database, opened once; creates a database only with ``create``."""
        if self._app is None:
            self._app = self._open(create)
        return self._app

    def _open(self, create: bool) -> tether.App:
        if self.app_ref:  # the App as its module configured it, on its own database
            app = load_app(self.app_ref)
            if self.db is not None:
                check_same_database(self.db, app)
            app.allow_code(*self.code)
            return app
        db = self.db or DEFAULT_DB
        if not create:
            _require_database(db)
        if self.code and os.getcwd() not in sys.path:  # `--code agents` from the project
            sys.path.insert(0, os.getcwd())
        return tether.open(db, code=self.code)

    def print(self, *parts: object) -> None:
        """Print to this context's output."""
        print(*parts, file=self.out)

    def close(self) -> None:
        """Close the Apps opened (the primary's and the read URL's)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._app is not None:
            self._app.close()
            self._app = None


def add_command(subparsers: Subparsers, command: Command) -> argparse.ArgumentParser:
    """Add ``command`` as a subcommand (with the global options also accepted after it)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        command.name,
        help=command.help,
        description=command.description or command.help,
        parents=[global_options(argparse.SUPPRESS)],
    )
    command.add_arguments(parser)
    parser.set_defaults(command=command)
    return parser


def global_options(default: Any) -> argparse.ArgumentParser:
    """``--db``, ``--app`` and ``--code``, accepted before and after the command."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--db",
        metavar="PATH_OR_URL",
        default=default,
        help=f"the database (default: ${DB_ENV}, else {DEFAULT_DB})",
    )
    p.add_argument(
        "--app",
        metavar="MODULE:APP",
        default=default,
        help="the App to use as configured (agents, tools, policy, queues): pkg.module:app "
        "or path/to/file.py:app; --db, if given, must name its database",
    )
    p.add_argument(
        "--tenant",
        metavar="TENANT",
        default=default,
        help=f"see and act on this tenant's runs alone (a run's owner; default: "
        f"${TENANT_ENV}); another tenant's run is 'not found'",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        default=default,
        help=f"act as this API token's identity (default: ${TOKEN_ENV}): its name is "
        f"recorded as who decided, its tenant scopes the command, its role must allow it. "
        f"Without one, the command acts as the local operator (see docs/auth.md)",
    )
    p.add_argument(
        "--read-url",
        metavar="URL",
        default=default,
        help=f"a read-only PostgreSQL URL (a replica) for the commands that only read (runs, "
        f"show, log, history, state, diff, export; serve's GET requests); default: "
        f"${READ_URL_ENV}. A replica lags: what it shows may be a moment old (see "
        f"docs/postgres.md)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default,
        help="log lines as text, or as one JSON object per line (time, level, logger, "
        "message, run_id and worker where known); default: $TETHER_LOG_FORMAT, else text",
    )
    p.add_argument(
        "--code",
        metavar="MODULE",
        action="append",
        type=code_modules,
        default=default,
        help=f"a module runs may name for their agent or tool code, imported when needed "
        f"(repeatable, or comma-separated; a package allows its submodules; default: "
        f"${CODE_ENV}). Nothing else a database names is ever imported",
    )
    return p


def code_option(given: list[frozenset[str]] | None) -> frozenset[str]:
    """The modules of every --code, else of $TETHER_CODE (a clear error if malformed)."""
    if given:
        return frozenset().union(*given)
    try:
        return parse_modules(os.environ.get(CODE_ENV), what=f"${CODE_ENV}")
    except ValueError as e:
        raise CommandError(str(e), 2) from None


# -- --db: which database -------------------------------------------------------------


def _require_database(db: str) -> None:
    if is_postgres(db):
        return
    path = sqlite_path(db)
    if not os.path.exists(path):
        raise CommandError(
            f"no tether database at {path}; give --db PATH or set {DB_ENV} "
            f"(`tether demo` makes one to look at)"
        )


def check_same_database(db: str, app: tether.App) -> None:
    """Refuse ``--db`` (or ``$TETHER_DB``) naming another database than the ``--app`` App's:
    the App's policy, approver groups, queues, lease ttl and retry belong to its own."""
    if not app.url:
        raise CommandError(
            "--app names an App built without a URL (App(store)), so --db cannot be checked "
            f"against it; drop --db (and unset ${DB_ENV}), or open the App with tether.open(url)",
            2,
        )
    if database_key(db) != database_key(app.url):
        raise CommandError(
            f"--db (or ${DB_ENV}) names {redact(db)}, but the --app App uses "
            f"{redact(app.url)}: the "
            f"App's configuration (policy, approver groups, queue limits, lease ttl, retry) "
            f"belongs to its own database. Drop --db (and unset ${DB_ENV}) to use the App's, "
            f"or point --app at an App opened on {redact(db)}",
            2,
        )


def database_key(url: str) -> tuple[str, ...]:
    """What identifies a database: a SQLite file's real path (``a.db``, ``./a.db``,
    ``sqlite:///a.db`` and its absolute path are one), or a PostgreSQL server, database
    and schema (user, password and connection options do not matter)."""
    if not is_postgres(url):
        return ("sqlite", os.path.realpath(sqlite_path(url)))
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = (parts.hostname or query.get("host", ["localhost"])[-1] or "localhost").lower()
    if host in ("127.0.0.1", "::1", "localhost") or host.startswith("/"):
        host = "localhost"  # the local server, by TCP or by its socket
    try:
        port = str(parts.port or query.get("port", ["5432"])[-1])
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
    user = unquote(parts.username or "") or query.get("user", [""])[-1]
    db = unquote(parts.path.lstrip("/")) or query.get("dbname", [""])[-1] or user or "postgres"
    return ("postgres", host, port, db, query.get("schema", ["tether"])[-1])


# -- --app: importing an App ------------------------------------------------------


def load_app(ref: str) -> tether.App:
    """Import the App named by ``pkg.module:app`` or ``path/to/file.py:app``."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise CommandError(f"--app takes pkg.module:app or path/to/file.py:app, not {ref!r}", 2)
    module = _import_target(target)
    obj = getattr(module, attr, None)
    if not isinstance(obj, tether.App):
        found = "nothing" if obj is None else f"a {type(obj).__name__}"
        raise CommandError(f"--app {ref}: {target} has no App named {attr!r} (found {found})")
    return obj


def _import_target(target: str) -> ModuleType:
    is_file = target.endswith(".py") or os.sep in target or "/" in target
    try:
        if is_file:
            return _import_file(target)
        if os.getcwd() not in sys.path:  # `--app agents:app` from the project directory
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(target)
    except CommandError:
        raise
    except (Exception, SystemExit) as e:
        raise CommandError(f"--app: cannot import {target} ({type(e).__name__}: {e})") from None


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise CommandError(f"--app: no Python file at {path}")
    folder, name = os.path.split(os.path.abspath(path))
    if folder not in sys.path:  # so that the file's own imports of its neighbours work
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), path)
    if spec is None or spec.loader is None:
        raise CommandError(f"--app: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad arguments and bad files are the user's to fix: one line, not a traceback."""
    try:
        yield
    except (ValueError, TypeError) as e:
        if isinstance(e, tether.TetherError):
            raise
        raise CommandError(str(e)) from None
