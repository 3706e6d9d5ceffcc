"""The ``tether`` command line: ``tether [--db PATH_OR_URL] [--app MODULE:APP] COMMAND …``.

``--app pkg.module:app`` (or ``path/to/file.py:app``) names the App to use, exactly as
its module configured it: its agents and tools, policy, approver groups, queues, lease
ttl and retry, on its own database. ``--db`` (default ``$TETHER_DB``) names the database
without ``--app`` (default ``tether.db`` in the current directory); with ``--app`` it
may only name the App's own database (else a usage error). What a run's row records
about its code is never imported unless the operator allows it: ``--app`` (the modules
of its agents and tools) or ``--code MODULE`` / ``$TETHER_CODE`` (see
:mod:`tether.engine.registry`).

Adding commands from another module
-----------------------------------
A command is a :class:`Command`: its name, one line of help, ``add_arguments(parser)``,
``run(args, ctx) -> int`` (the exit code) and an optional longer description. ``ctx`` is
a :class:`Context`: ``ctx.app()`` opens the database (refusing to create one unless
given ``create=True``) with the agents of ``--app`` registered; ``ctx.print`` prints to
``ctx.out``. A module contributes commands with a ``register(subparsers)`` function::

    # src/tether/cli_count.py
    import argparse
    from tether.cli import Command, Context, Subparsers, add_command

    def _arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="the run id")

    def _count(args: argparse.Namespace, ctx: Context) -> int:
        ctx.print(len(ctx.app().events(args.run)), "events")
        return 0

    def register(subparsers: Subparsers) -> None:
        add_command(subparsers, Command("count", "count a run's events", _arguments, _count))

Every ``tether/cli_*.py`` module is imported when the parser is built and its
``register`` called after this module's own :func:`register`; this file does not change
(``tether/cli_timetravel.py`` is one). The formatting helpers here (:func:`table`,
:func:`short`, :func:`when`, :func:`event_summary`, :func:`status_line`) are for them too.
A failure the user can fix is raised as a :class:`tether.TetherError` (or
:class:`CommandError`) and printed as one line, ``tether: error: …``, exit code 1 (2 for
usage errors); never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import pkgutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

import tether
import tether.cli
from tether.engine.registry import CODE_ENV, parse_modules
from tether.model import inputs
from tether.model.clock import owner_is_dead_local
from tether.model.state import FINISHED, STATUSES
from tether.store import RunRecord
from tether.store.sqlite import sqlite_path

DEFAULT_DB = "tether.db"
DB_ENV = "TETHER_DB"
WIDTH = 100  # longest value shown in one table cell or field

if TYPE_CHECKING:  # the type `register(subparsers)` receives (generic only in typeshed)
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
    """One ``tether`` subcommand."""

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
        self._app: tether.App | None = None

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
        """Close the App if one was opened."""
        if self._app is not None:
            self._app.close()
            self._app = None


def _require_database(db: str) -> None:
    if db.startswith(("postgres://", "postgresql://")):
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
            f"--db (or ${DB_ENV}) names {db}, but the --app App uses {app.url}: the "
            f"App's configuration (policy, approver groups, queue limits, lease ttl, retry) "
            f"belongs to its own database. Drop --db (and unset ${DB_ENV}) to use the App's, "
            f"or point --app at an App opened on {db}",
            2,
        )


def database_key(url: str) -> tuple[str, ...]:
    """What identifies a database: a SQLite file's real path (``a.db``, ``./a.db``,
    ``sqlite:///a.db`` and its absolute path are one), or a PostgreSQL server, database
    and schema (user, password and connection options do not matter)."""
    if not url.startswith(("postgres://", "postgresql://")):
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


# -- formatting ---------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: str = "") -> str:
    """Rows as aligned columns; the columns whose header is in ``right`` align right."""
    cells = [list(headers), *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            c.rjust(w) if h in right.split() else c.ljust(w)
            for c, w, h in zip(row, widths, headers, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join(line(r) for r in cells)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def when(at: float | None, *, date: bool = True) -> str:
    """A timestamp in local time (``date=False``: time of day with milliseconds)."""
    if at is None:
        return "-"
    try:
        if not date:
            return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a damaged row)
        return f"{at!r} (not a time)"


def whole_number(low: int = 0, high: int = inputs.INT64_MAX) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (at most 2^63-1, what the
    databases hold), else a usage error naming the range."""

    def parse(text: str) -> int:
        try:
            n = int(text.strip()) if len(text) <= 30 else None
        except ValueError:
            n = None
        if n is None or not low <= n <= high:
            shown = text if len(text) <= 40 else text[:37] + "..."
            bound = f"of at most {high}" if n is not None and n > high else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"a whole number {bound}, not {shown!r}")
        return n

    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


positive_int = whole_number(1)  # an argparse type: a whole number of 1 or more


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (and finite)."""
    try:
        x = float(text) if len(text) <= 40 else 0.0
    except ValueError:
        x = 0.0
    if not 0 < x < float("inf"):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, not {shown!r}")
    return x


def short(value: Any, width: int = WIDTH) -> str:
    """``value`` as compact JSON, cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(plain(value), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (for --json): tuples and sets as lists, the rest as str."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def dump_json(ctx: Context, value: Any) -> None:
    """Print ``value`` as indented JSON."""
    ctx.print(json.dumps(plain(value), ensure_ascii=False, indent=2))


def stalled(record: RunRecord, now: float | None = None) -> bool:
    """True when the run's row says running but no live process holds its lease."""
    if record.status != "running":
        return False
    if record.lease_owner is None or record.lease_expires is None:
        return True
    now = time.time() if now is None else now
    return record.lease_expires < now or owner_is_dead_local(record.lease_owner)


def _status(record: RunRecord, state: tether.RunState) -> str:
    if state.status == "running" and stalled(record):
        return "running (stalled)"
    return state.status


def status_line(state: tether.RunState) -> str:
    """``completed, 8 of 8 committed`` or ``failed, step 3 of 8, 1–2 committed``."""
    position = state.describe_position()
    return position if position.startswith(state.status) else f"{state.status}, {position}"


def plural(n: int, noun: str) -> str:
    """``1 execution``, ``2 executions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _money(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.4f}"


# -- demo ---------------------------------------------------------------------------


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # the demo takes only the global --db


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    from tether import demo

    return demo.run_demo(ctx.explicit_db or demo.DEFAULT_DB)


# -- runs ---------------------------------------------------------------------------


def _runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=STATUSES, help="only runs with this status")
    parser.add_argument("--agent", help="only runs of this agent")
    parser.add_argument(
        "--limit", type=positive_int, default=20, help="at most this many (default 20)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _runs(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    records = app.runs(status=args.status, agent=args.agent, limit=args.limit)
    rows = [_summary_of(app, r) for r in records]
    if args.json:
        dump_json(ctx, rows)
    elif not rows:
        ctx.print("no runs" + (" match" if args.status or args.agent else " yet"))
    else:
        ctx.print(
            table(
                ["ID", "AGENT", "STATUS", "POSITION", "UPDATED"],
                [
                    [
                        r["id"],
                        r["agent"],
                        r["status"] + (" (stalled)" * r["stalled"]),
                        r["position"],
                        when(r["updated_at"]),
                    ]
                    for r in rows
                ],
            )
        )
    return 0


def _summary_of(app: tether.App, record: RunRecord) -> dict[str, Any]:
    """``run_summary``, or for a damaged run what its row says (status ``damaged``)."""
    try:
        return run_summary(record, app.get(record.id), expected_positions(app, record))
    except tether.RunDamaged:
        return {
            "id": record.id,
            "agent": record.agent,
            "version": record.version,
            "status": "damaged",
            "stalled": False,
            "position": f"log damaged: tether show {record.id}",
            "committed": None,
            "steps": None,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
        }


def expected_positions(app: tether.App, record: RunRecord) -> int | None:
    """How many positions the newest completed run of the same agent and version had."""
    key = (record.agent, record.version)
    cache: dict[tuple[str, str | None], int | None] = app.__dict__.setdefault("_cli_expected", {})
    if key not in cache:
        done = [
            r
            for r in app.runs(status="completed", agent=record.agent, limit=20)
            if r.version == record.version
        ]
        try:
            cache[key] = len(app.get(done[0].id).steps) if done else None
        except tether.RunDamaged:
            cache[key] = None
    return cache[key]


def run_summary(
    record: RunRecord, state: tether.RunState, expected: int | None = None
) -> dict[str, Any]:
    """One run as plain data: identity, status, position."""
    return {
        "id": record.id,
        "agent": record.agent,
        "version": record.version,
        "status": state.status,
        "stalled": stalled(record),
        "position": state.describe_position(expected),
        "committed": state.committed,
        "steps": len(state.steps),
        "created_at": state.created_at,
        "updated_at": state.updated_at,
    }


# -- show ---------------------------------------------------------------------------


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--traceback", action="store_true", help="print the failure's traceback")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _show(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    record = app.store.get_run(inputs.lookup_id(args.run))
    try:
        state = app.get(args.run)
    except tether.RunDamaged as e:
        return _show_damaged(ctx, record, e, args.json)
    if args.json:
        dump_json(ctx, run_details(record, state))
        return 0
    ctx.print(_fields(_header_fields(record, state, expected_positions(ctx.app(), record))))
    if state.blocked:
        ctx.print(_blocked_text(state.blocked, record))
    if state.failure:
        ctx.print(_failure_text(state.failure, record.id, args.traceback))
    if state.steps:
        ctx.print()
        ctx.print(_steps_table(state.steps))
    return 0


def _show_damaged(ctx: Context, record: RunRecord, e: tether.RunDamaged, as_json: bool) -> int:
    """What the row says of a run whose log is damaged, and the damage (exit 1)."""
    if as_json:
        missing = [list(r) for r in e.missing]
        dump_json(
            ctx,
            {"id": record.id, "agent": record.agent, "status": "damaged"}
            | {"row_status": record.status, "damage": str(e), "missing": missing},
        )
        return 1
    ctx.print(
        _fields(
            [
                ("run", record.id),
                (
                    "agent",
                    record.agent + (f" (version {record.version})" if record.version else ""),
                ),
                ("status", f"damaged (its row says {record.status})"),
                ("damage", str(e).split(": ", 1)[1]),
            ]
        )
    )
    return 1


def run_details(record: RunRecord, state: tether.RunState) -> dict[str, Any]:
    """Everything ``show --json`` prints."""
    u = state.usage
    return {
        **run_summary(record, state),
        "input": state.input,
        "output": state.output,
        "failure": state.failure,
        "blocked": state.blocked,
        "vars": state.vars,
        "executions": state.executions,
        "usage": {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cost": u.cost,
            "calls": u.calls,
        },
        "steps": [_step_data(s) for s in state.steps],
    }


def _step_data(s: tether.StepState) -> dict[str, Any]:
    usage = s.usage
    return {
        "position": s.position,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "attempts": s.attempts,
        "duration_ms": _ms(s.duration),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "cost": usage.cost if usage else None,
        "output": s.output,
        "why": s.why,
        "errors": [{k: e.get(k) for k in ("type", "message", "at")} for e in s.errors],
    }


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _header_fields(
    record: RunRecord, state: tether.RunState, expected: int | None = None
) -> list[tuple[str, str]]:
    u = state.usage
    out = [
        ("run", record.id),
        ("agent", record.agent + (f" (version {record.version})" if record.version else "")),
        ("status", _status(record, state)),
        ("position", state.describe_position(expected)),
        ("created", when(state.created_at)),
        ("updated", f"{when(state.updated_at)} ({plural(state.executions, 'execution')})"),
        ("input", short(state.input)),
        (
            "usage",
            f"{plural(u.calls, 'model call')}, {u.input_tokens} tokens in, "
            f"{u.output_tokens} out, {_money(u.cost)}",
        ),
    ]
    if state.status == "completed":
        out.insert(7, ("output", short(state.output)))
    out[3:3] = _where_fields(record)
    if stalled(record):
        out.append(("note", f"no live process holds it: `tether resume {record.id}`"))
    out += [("var", f"{k} = {short(v)}") for k, v in state.vars.items()]
    out += [
        ("decision", f"{d.position} {d.name} = {short(d.output, 40)}; why: {short(d.why)}")
        for d in state.decisions
    ]
    return out


def _where_fields(record: RunRecord, now: float | None = None) -> list[tuple[str, str]]:
    """Its queue (and when it is due, if later), and who holds its lease, while either
    matters: ``queue  default, due 2026-11-25 14:59:01 (in 22 s)``."""
    now = time.time() if now is None else now
    out = []
    unfinished = record.status not in FINISHED
    if record.queue is not None and unfinished:
        text = record.queue + (f", priority {record.priority}" if record.priority else "")
        due = record.available_at
        if record.status in ("queued", "waiting") and due is not None and due > now:
            text += f", due {when(due)} (in {due - now:.0f} s)"
        out.append(("queue", text))
    if record.lease_owner is not None and (record.lease_expires or 0) >= now:
        out.append(("held by", f"{record.lease_owner} (lease until {when(record.lease_expires)})"))
    return out


def _fields(pairs: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"{k:<10} {v}" for k, v in pairs)


def _blocked_text(b: Mapping[str, Any], record: RunRecord) -> str:
    """Why a run is blocked and what continues it."""
    again = (
        f"`tether retry {record.id}` puts it back in queue {record.queue!r}"
        if record.queue is not None
        else f"`tether resume {record.id}` continues it"
    )
    lines = [
        ("blocked", f"at position {b.get('position')}, since {when(b.get('at'))}"),
        ("", f"the log recorded: {b.get('recorded')}"),
        ("", f"the code now calls: {b.get('found')}"),
        ("", "the agent's code changed under the run; nothing was undone"),
        ("", f"restore or patch the code, then {again}"),
        ("", f"(or `tether fork`, or `tether cancel {record.id}` [--compensate])"),
    ]
    return _fields(lines)


def _failure_text(f: Any, run_id: str, with_traceback: bool) -> str:
    where = f"in {f.get('kind') or 'step'} {f.get('step')!r} (position {f.get('position')})"
    lines = [
        ("failure", f"{f.get('type')}: {short(f.get('message', ''))}"),
        ("", f"{where if f.get('step') else 'outside any step'}, at {when(f.get('at'))}"),
    ]
    if f.get("input"):
        lines.append(("", f"input: {short(f['input'])}"))
    text = _fields(lines)
    if with_traceback and f.get("traceback"):
        return text + "\n\n" + str(f["traceback"]).rstrip()
    return text + f"\n{'':<10} (the traceback: tether show {run_id} --traceback)"


def _steps_table(steps: Sequence[tether.StepState]) -> str:
    rows = []
    for s in steps:
        u = s.usage
        rows.append(
            [
                s.position,
                s.kind or None,  # a position not recorded yet has no kind nor name
                s.name or None,
                s.status,
                s.attempts,
                _ms(s.duration),
                u.input_tokens if u else None,
                u.output_tokens if u else None,
                _money(u.cost) if u else None,
            ]
        )
    return table(
        ["POS", "KIND", "NAME", "STATUS", "ATTEMPTS", "MS", "IN", "OUT", "COST"],
        rows,
        right="POS ATTEMPTS MS IN OUT COST",
    )


# -- log ----------------------------------------------------------------------------


def _log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--after", type=whole_number(), default=0, metavar="N", help="only events with seq > N"
    )
    parser.add_argument("--json", action="store_true", help="print the full events as JSON lines")


def _log(args: argparse.Namespace, ctx: Context) -> int:
    events = ctx.app().events(args.run, after=args.after)
    if args.json:
        for e in events:
            ctx.print(
                json.dumps(
                    {
                        "run_id": e.run_id,
                        "seq": e.seq,
                        "type": e.type,
                        "at": e.at,
                        "actor": e.actor,
                        "data": json.loads(e.data),
                    },
                    ensure_ascii=False,
                )
            )
        return 0
    rows = [
        [e.seq, when(e.at, date=False), e.type, event_summary(e.type, e.payload())] for e in events
    ]
    ctx.print(table(["SEQ", "TIME", "TYPE", "SUMMARY"], rows, right="SEQ"))
    return 0


def event_summary(type_: str, d: dict[str, Any]) -> str:
    """One event's data in a few words."""
    step = f"{d.get('pos')} {d.get('name')}"
    if type_ == "run.created":
        text = f"agent {d.get('agent')}, input {short(d.get('input'), 60)}"
    elif type_ == "run.started":
        text = f"by {d.get('by')}, epoch {d.get('epoch')}" + (" (retry)" * bool(d.get("retry")))
    elif type_ == "run.completed":
        text = short(d.get("output"))
    elif type_ == "run.suspended":
        text = f"{d.get('reason')}; {d.get('status', 'running')}"
        text += f" in {d['queue']!r}" if d.get("queue") else ""
    elif type_ == "run.cancelled":
        text = f"by {d.get('by') or '-'}: {d.get('reason')}"
        failures = d.get("compensation_failures")
        text += f"; {len(failures)} undo(s) failed" if failures else ""
    elif type_ == "run.blocked":
        text = f"position {d.get('position')}: recorded {d.get('recorded')}, found {d.get('found')}"
    elif type_ == "run.failed":
        err = d.get("error", {})
        text = f"{err.get('type')}: {err.get('message')} (position {err.get('position')})"
    elif type_ == "step.completed":
        text = (
            f"{step} ({d.get('kind')}), attempt {d.get('attempt')}, "
            f"{_ms(d.get('duration'))} ms -> {short(d.get('output'), 50)}"
        )
    elif type_ == "step.failed":
        retry = "will retry" if d.get("retry_at") is not None else "no retry left"
        err = d.get("error", {})
        text = f"{step} attempt {d.get('attempt')}: {err.get('type')}: {err.get('message')}"
        text += f"; {retry}"
    elif type_ == "decision":
        text = f"{step} = {short(d.get('choice'), 40)}; why: {d.get('why')}"
    elif type_ in ("var.set", "var.deleted"):
        text = f"{step} = {short(d.get('value'), 60)}" if type_ == "var.set" else step
    else:
        text = short(d)
    return short(text, 80)


# -- resume and retry -----------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")


def _resume(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    before = app.get(args.run)
    handle = app.resume(args.run)
    if before.status in ("completed", "cancelled"):
        ctx.print(f"run {handle.id} is already {handle.status}; nothing to resume")
    report_handle(ctx, app, handle)
    return 0


def _retry_arguments(parser: argparse.ArgumentParser) -> None:
    _run_arguments(parser)
    parser.add_argument(
        "--here",
        action="store_true",
        help="execute it in this process even if it was started in a queue",
    )


def _retry(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    record = app.store.get_run(inputs.lookup_id(args.run))
    queue = record.queue
    if queue is None or args.here:
        report_handle(ctx, app, app.retry_run(args.run, in_queue=False))
        return 0
    handle = app.retry_run(args.run, in_queue=True)
    what = "retries it from its failed step"
    if record.status == "blocked":
        what = "goes on with it (blocked again if its code still differs from its log)"
    ctx.print(
        f"run {handle.id} is queued again in {queue!r}: a worker of that queue {what} "
        f"(`tether retry {handle.id} --here` executes it in this process)"
    )
    return 0


def report_handle(ctx: Context, app: tether.App, handle: tether.RunHandle) -> None:
    """What an execution reused and ran, and how the run ended."""
    state = app.get(handle.id)
    ctx.print(f"run {handle.id}: {status_line(state)}")
    ctx.print(f"reused from the journal (not executed again): {_positions(handle.reused)}")
    ctx.print(f"executed now: {_positions(handle.executed)}")
    waiting = getattr(handle, "waiting", None)  # what a waiting run waits for, if anything
    if waiting:
        ctx.print(f"waiting for: {short(waiting)}")
    ctx.print(f"output: {short(handle.output)}")


def _positions(items: Sequence[tuple[int, str]]) -> str:
    return ", ".join(f"{pos} {name}" for pos, name in items) or "nothing"


# -- the parser and main --------------------------------------------------------------

COMMANDS = (
    Command(
        "demo",
        "run the demo: an agent killed mid-run by SIGKILL resumes",
        _demo_arguments,
        _demo,
        "Starts a sample incident-investigation agent in a child process that kills "
        "itself mid-run, then resumes the run here and shows which steps were reused from "
        "the journal and which ran. Uses its own database, ./tether-demo.db (overwritten; "
        "--db to choose another; $TETHER_DB is not used). No network, no API key.",
    ),
    Command(
        "runs",
        "list runs, newest first",
        _runs_arguments,
        _runs,
        "Lists runs with their status and position (e.g. 'step 6 of 9, 1–5 committed'). "
        "'running (stalled)' means no live process holds the run: resume it. 'blocked' "
        "means its agent's code no longer matches its log: `tether show RUN` says where.",
    ),
    Command(
        "show",
        "show one run: status, position, failure, usage, vars, steps",
        _show_arguments,
        _show,
        "Shows a run's status, agent, position, usage totals, task variables and decisions, "
        "its failure (type, message, step, position; the traceback with --traceback) and a "
        "table of its steps: position, kind, name, status, attempts, duration, tokens, cost.",
    ),
    Command(
        "log",
        "print a run's events (its append-only log)",
        _log_arguments,
        _log,
        "Prints a run's events in order: seq, time, type and a summary of the data. "
        "--json prints each full event as one JSON line.",
    ),
    Command(
        "resume",
        "continue a stopped run: committed steps are reused, the rest run",
        _run_arguments,
        _resume,
        "Continues a run that stopped (its process died, or was interrupted). The agent's "
        "code is found through --app, or else where the run recorded it (module and file).",
    ),
    Command(
        "retry",
        "execute a failed (or blocked) run again from where it stopped",
        _retry_arguments,
        _retry,
        "Executes a failed run again; its committed steps are reused from the journal. A "
        "blocked run (its code changed under it) goes on the same way once its code is "
        "restored or patched. A run started in a queue (app.start) goes back to that queue, "
        "where a worker retries it; --here executes it in this process instead.",
    ),
)


def add_command(subparsers: Subparsers, command: Command) -> argparse.ArgumentParser:
    """Add ``command`` as a subcommand (with the global options also accepted after it)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        command.name,
        help=command.help,
        description=command.description or command.help,
        parents=[_global_options(argparse.SUPPRESS)],
    )
    command.add_arguments(parser)
    parser.set_defaults(command=command)
    return parser


def register(subparsers: Subparsers) -> None:
    """Add this module's commands (what every ``tether/cli_*.py`` module also defines)."""
    for command in COMMANDS:
        add_command(subparsers, command)


def _global_options(default: Any) -> argparse.ArgumentParser:
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
        "--code",
        metavar="MODULE",
        action="append",
        type=_code_modules,
        default=default,
        help=f"a module runs may name for their agent or tool code, imported when needed "
        f"(repeatable, or comma-separated; a package allows its submodules; default: "
        f"${CODE_ENV}). Nothing else a database names is ever imported",
    )
    return p


def _code_modules(text: str) -> frozenset[str]:
    if not text.strip():
        raise argparse.ArgumentTypeError("a module name is needed, e.g. --code myproject.agents")
    try:
        return parse_modules(text, what="--code")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _code_option(given: list[frozenset[str]] | None) -> frozenset[str]:
    """The modules of every --code, else of $TETHER_CODE (a clear error if malformed)."""
    if given:
        return frozenset().union(*given)
    try:
        return parse_modules(os.environ.get(CODE_ENV), what=f"${CODE_ENV}")
    except ValueError as e:
        raise CommandError(str(e), 2) from None


def build_parser() -> argparse.ArgumentParser:
    """The ``tether`` parser with this module's commands and those of ``tether/cli_*.py``."""
    parser = argparse.ArgumentParser(
        prog="tether",
        parents=[_global_options(None)],
        description="Durable, auditable state for LLM agents: inspect and resume runs.",
        epilog="`tether COMMAND --help` describes a command. Start with `tether demo`.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    register(subparsers)
    for module in _extensions():
        module.register(subparsers)
    return parser


def _extensions() -> list[ModuleType]:
    found = []
    for info in pkgutil.iter_modules(tether.cli.__path__, "tether.cli."):
        if info.name.rpartition(".")[2] in ("main", "__main__"):
            continue
        try:
            found.append(importlib.import_module(info.name))
        except Exception as e:  # a broken extension must not take the whole CLI down
            print(f"tether: warning: {info.name} not loaded: {e}", file=sys.stderr)
    return [m for m in found if callable(getattr(m, "register", None))]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tether`` with ``argv`` (default: the process arguments); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return 2
    ctx = Context(args.db, args.app)
    try:
        ctx.code = _code_option(args.code)
        return command.run(args, ctx)
    except CommandError as e:
        return _fail(str(e), e.code)
    except tether.InvalidInput as e:  # a value given on the command line: a usage error
        return _fail(str(e), 2)
    except tether.TetherError as e:
        return _fail(str(e), 1)
    except KeyboardInterrupt:
        run = getattr(args, "run", None) if command.name in ("resume", "retry") else None
        note = f"; run {run} was suspended, `tether resume {run}` continues it" if run else ""
        return _fail("interrupted" + note, 130)
    except BrokenPipeError:  # `tether log RUN | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout must stay open until exit
        return 0
    except Exception as e:
        if os.environ.get("TETHER_DEBUG"):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (TETHER_DEBUG=1 shows the traceback)", 1)
    finally:
        ctx.close()


def _fail(message: str, code: int) -> int:
    sys.stdout.flush()
    print(f"tether: error: {' '.join(message.split())}", file=sys.stderr)
    return code
