"""A PostgreSQL URL's password never shows: not in an error, not in a log line, not in the
CLI's output (`tether workers`, a worker's start line, its errors). The server trusts
127.0.0.1, so a URL with a password connects; every path that fails is driven with one."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from _conformance import PG_URL, Backend

import tether
from tether.errors import TetherError
from tether.store.postgres import PostgresStore
from tether.store.urls import redact

SECRET = "Sup3r-s3cret_pw"


def _with_password(url: str, *, port: int | None = None, db: str | None = None) -> str:
    parts = urlsplit(url)
    host = f"{parts.hostname}:{port or parts.port or 5432}"
    netloc = f"{parts.username or 'postgres'}:{SECRET}@{host}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{db}" if db else parts.path))


def _message(call: Callable[[], Any]) -> str:
    with pytest.raises((TetherError, ValueError)) as caught:
        call()
    e: BaseException | None = caught.value
    text = []
    while e is not None:  # the whole chain an operator's traceback would show
        text.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n".join(text)


def test_redact_hides_url_and_keyword_passwords() -> None:
    assert redact(f"postgresql://bob:{SECRET}@db:5432/x?sslmode=require") == (
        "postgresql://bob:***@db:5432/x?sslmode=require"
    )
    assert redact(f"postgres://u@h/d?password={SECRET}&x=1") == "postgres://u@h/d?password=***&x=1"
    assert redact(f"host=h password='{SECRET} x' user=u") == "host=h password=*** user=u"
    assert redact("postgresql://u@h/d and tether.db") == "postgresql://u@h/d and tether.db"


def test_no_error_shows_the_password(pg_backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    schema = f"?schema={pg_backend.schema}"
    messages = {
        "bad host": _message(
            lambda: PostgresStore(_with_password(PG_URL, port=1) + schema, timeout=1)
        ),
        "bad db": _message(
            lambda: PostgresStore(_with_password(PG_URL, db="no_such_db_tether") + schema)
        ),
        "bad url": _message(lambda: PostgresStore(_with_password(PG_URL) + "?bogus_opt=1")),
        "bad keywords": _message(lambda: PostgresStore(f"host=127.0.0.1 password={SECRET} x")),
        "bad prepare": _message(lambda: PostgresStore(_with_password(PG_URL) + "?prepare=x")),
    }
    url = _with_password(pg_backend.url.split("?")[0]) + schema
    store = PostgresStore(url, max_size=1, timeout=0.2)
    pg_backend.opened.append(store)
    assert SECRET not in store.where
    with store.transaction():  # the pool's one connection is taken: the next call times out
        messages["pool timeout"] = _message(lambda: store.get_run("x"))
    store.close()
    messages["closed pool"] = _message(lambda: store.get_run("x"))
    messages["closed app"] = _message(
        lambda: tether.open(url, timeout=0.2).close() or store.load("x")
    )
    for what, text in messages.items():
        assert SECRET not in text, (what, text)
        assert text, what
    assert "no_such_db_tether" in messages["bad db"]  # the errors still say what is wrong
    assert "127.0.0.1:1" in messages["bad host"]
    # a listener whose URL fails logs where, without the password
    listening = PostgresStore(url, listen_url=_with_password(PG_URL, port=1), timeout=0.5)
    pg_backend.opened.append(listening)
    wake = threading.Event()
    listening.wait_for_work(["q"], 0.3, wake)
    listening._closing.wait(1.5)  # the listener thread tries, fails and logs
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "LISTEN on" in logged and SECRET not in logged, logged


def _cli(url: str, *args: str, app: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_DB"}
    where = ["--app", f"{app}:app"] if app else ["--db", url]
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *where, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_the_cli_never_shows_the_password(pg_backend: Backend, tmp_path: Path) -> None:
    url = _with_password(pg_backend.url.split("?")[0]) + f"?schema={pg_backend.schema}"
    tether.open(url).close()  # the schema exists
    app = tmp_path / "pw_app.py"
    app.write_text(f"import tether\n\napp = tether.open({url!r})\n")
    shown = {
        "workers": _cli(url, "workers"),
        "worker": _cli(url, "worker", "--until-idle", "--poll", "0.05", app=app),
        "workers, bad host": _cli(_with_password(PG_URL, port=1), "workers"),
        "runs, bad db": _cli(_with_password(PG_URL, db="no_such_db_tether"), "runs"),
    }
    for what, done in shown.items():
        assert SECRET not in done.stdout + done.stderr, (what, done.stdout, done.stderr)
    assert shown["workers"].returncode == 0 and shown["worker"].returncode == 0
    assert "claims from" in shown["worker"].stdout and "***" in shown["worker"].stdout
    assert shown["workers, bad host"].returncode != 0
    assert shown["runs, bad db"].returncode != 0
