"""Bad input gets a clear error and leaves the database intact."""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.integration


def _dump(path: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as c:
        return [tuple(r) for r in c.execute("SELECT * FROM events ORDER BY key")]


def test_unencodable_step_result_fails_run_with_context(app: tether.App) -> None:
    sock = socket.socket()

    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("ok", lambda: 1)
        run.step("connect", lambda: {"items": [1, {"conn": sock}]})

    try:
        with pytest.raises(tether.RunFailed) as info:
            app.run(agent)
    finally:
        sock.close()
    cause = info.value.__cause__
    assert isinstance(cause, tether.EncodeError)
    msg = str(cause)
    rid = info.value.run_id
    assert rid in msg and "'connect'" in msg and "position 2" in msg
    assert "socket.socket" in msg and "$.items[1].conn" in msg
    state = app.get(rid)
    assert state.status == "failed"
    assert state.failure is not None and state.failure["step"] == "connect"
    assert state.failure["position"] == 2 and state.failure["type"] == "tether.errors.EncodeError"
    assert state.steps[0].status == "completed" and len(state.steps) == 1


def test_unencodable_agent_input_creates_no_run(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run, x: object) -> None:
        pass

    with pytest.raises(tether.EncodeError, match=r"kwargs\.x"):
        app.run(agent, x=object())
    assert app.runs() == []


def test_unencodable_task_variable(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        run.vars["s"] = {1, object()}

    with pytest.raises(tether.RunFailed) as info:
        app.run(agent)
    assert "task variable 's'" in str(info.value.__cause__)


def test_unknown_run_id(app: tether.App) -> None:
    with pytest.raises(tether.NotFound, match="no run 'nope'"):
        app.resume("nope")
    with pytest.raises(tether.NotFound):
        app.get("nope")
    with pytest.raises(tether.NotFound):
        app.events("nope")


def test_unregistered_agent(app: tether.App) -> None:
    with pytest.raises(tether.NotFound, match="no agent named 'ghost'"):
        app.run("ghost")

    def plain(run: tether.Run) -> None:
        pass

    with pytest.raises(tether.NotFound, match="not a tether agent"):
        app.run(plain)


def test_agent_without_run_parameter_is_refused(app: tether.App) -> None:
    with pytest.raises(TypeError, match="first parameter"):
        app.agent(lambda: None)


class _Agents:
    def method(self, run: tether.Run) -> int:
        return 1


def _base(run: tether.Run, x: int, y: int) -> int:
    return x + y


def _gen(run: tether.Run) -> Iterator[int]:
    yield 1


async def _agen(run: tether.AsyncRun) -> AsyncIterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_Agents().method, "not <bound method"),
        (functools.partial(_base, y=2), "not functools.partial"),
        (len, "not <built-in function len>"),
        (_gen, "'_gen' is a generator"),
        (_agen, "'_agen' is a generator"),
    ],
)
def test_an_agent_that_is_not_a_plain_function_is_refused_saying_why(
    app: tether.App, fn: Any, words: str
) -> None:
    """A bound method or a partial has no module and name a resume could find it by (it
    raised AttributeError); a generator's result cannot be stored (its run failed later)."""
    with pytest.raises(TypeError, match=r"def my_agent|Return the items") as info:
        app.agent(fn, name="odd")
    assert words in str(info.value)
    assert "odd" not in app.agents()


class _Callable:
    def __call__(self, to: str) -> str:
        return to


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_Agents().method, "not <bound method"),
        (functools.partial(_base, y=2), "not functools.partial"),
        (_Callable(), "not <"),
        (len, "not <built-in function len>"),
    ],
)
def test_a_tool_that_is_not_a_plain_function_is_refused_saying_why(
    app: tether.App, fn: Any, words: str
) -> None:
    """It raised AttributeError or inspect's TypeError (a tool carries its definition on
    its function, found again by run.tool(fn, ...)); now it says what to write instead."""
    with pytest.raises(TypeError, match=r"@app.tool decorates a function .* Wrap it: def ") as info:
        app.tool(fn, risk="write", name="odd")
    assert words in str(info.value)
    with pytest.raises(TypeError, match=r"@app.tool decorates a function"):
        tether.tool(fn, risk="read")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "the tool's name must be a non-empty str, not ''"),
        ("a\nb", "the tool's name 'a\\nb' contains the control character '\\n' at index 1"),
        (5, "the tool's name must be a name (a str), not int 5"),
    ],
)
def test_a_tools_name_is_checked(app: tether.App, name: Any, says: str) -> None:
    def lookup(q: str) -> str:
        return q

    with pytest.raises(tether.InvalidInput) as info:
        app.tool(lookup, risk="read", name=name)
    assert str(info.value).startswith(says)


def test_a_step_or_agent_returning_an_unawaited_coroutine_says_so(app: tether.App) -> None:
    made: list[Any] = []

    async def fetch() -> int:
        return 1

    def called() -> Any:  # an async function called, not awaited, as a sync agent would
        made.append(fetch())
        return made[-1]

    @app.agent
    def sync_agent(run: tether.Run) -> object:
        return run.step("f", called)

    with pytest.raises(tether.RunFailed, match="an async function's call, not awaited") as e:
        app.run(sync_agent)
    for coroutine in made:  # the user's: closed here, not reported as never awaited later
        coroutine.close()
    assert ".. See" not in str(e.value)  # the message's own period, not two
    assert "not awaited" in str(app.get(e.value.run_id).error)


def test_not_a_database(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello, this is not sqlite\n" * 10)
    before = p.read_bytes()
    with pytest.raises(tether.NotATetherDatabase, match="not a SQLite file"):
        tether.open(str(p))
    assert p.read_bytes() == before


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(tether.NotATetherDatabase, match="directory"):
        tether.open(str(tmp_path))


def test_corrupt_database(tmp_path: Path) -> None:
    p = tmp_path / "agent.db"
    app = tether.open(str(p))
    app.close()
    data = bytearray(p.read_bytes())
    data[100:4096] = b"\xde\xad" * ((4096 - 100) // 2)  # trash the schema page
    p.write_bytes(bytes(data))
    with pytest.raises(tether.NotATetherDatabase, match="corrupt"):
        tether.open(str(p))


def test_sqlite_database_of_another_program(tmp_path: Path) -> None:
    p = str(tmp_path / "other.db")
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(tether.NotATetherDatabase, match="another program"):
        tether.open(p)
    with sqlite3.connect(p) as c:
        tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["customers"]


def test_database_from_newer_schema_is_refused_untouched(db_path: str) -> None:
    app = tether.open(db_path)

    @app.agent
    def agent(run: tether.Run) -> int:
        return int(run.step("s", lambda: 1))

    app.run(agent)
    app.close()
    with sqlite3.connect(db_path) as c:
        c.execute("UPDATE tether_meta SET value='999' WHERE key='schema_version'")
    before = _dump(db_path)
    with pytest.raises(tether.SchemaTooNew, match="schema 999"):
        tether.open(db_path)
    assert _dump(db_path) == before


def test_bad_options(db_path: str) -> None:
    with pytest.raises(ValueError, match="durability"):
        tether.open(db_path, durability="sometimes")
    with pytest.raises(ValueError, match="max_attempts"):
        tether.Retry(max_attempts=0)
    with pytest.raises(ValueError):
        tether.open("")
    assert not os.path.exists(db_path)


def test_step_needs_a_name_and_a_callable(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("", lambda: 1)

    with pytest.raises(tether.RunFailed, match="a step's name must be a non-empty str"):
        app.run(agent)

    @app.agent
    def agent2(run: tether.Run) -> None:
        run.step("s", 42)

    with pytest.raises(tether.RunFailed, match="needs a callable"):
        app.run(agent2)


def test_full_durability_works(tmp_path: Path) -> None:
    app = tether.open(f"sqlite:///{tmp_path}/full.db", durability="full")

    @app.agent
    def agent(run: tether.Run) -> int:
        return int(run.step("s", lambda: 5))

    assert app.run(agent).output == 5
    with app.store._reading() as conn:  # type: ignore[attr-defined]
        mode = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert mode == 2  # FULL
    app.close()
