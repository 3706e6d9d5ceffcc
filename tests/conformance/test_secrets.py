"""Secrets: a planted value is stored nowhere, shown nowhere, exported nowhere.

Each test plants unique random values as secrets (``tether.Secret``, a tool's
``secret=`` parameter, a credential that only the redaction rules recognise) in every
place a run stores something, then searches the database itself (the SQLite file and
its WAL, or every row of every tether table in the PostgreSQL schema, as text), the
export, ``tether show``/``tether log`` (a real CLI process) and the audit log.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _conformance import Backend

import tether


def _plant(what: str) -> str:
    return f"plant{what}{secrets.token_hex(12)}"


def _stored_text(backend: Backend) -> str:
    """Everything the database holds, as text: the SQLite files' bytes (decoded loosely,
    so that text inside pages is found), or each row of each table of the schema."""
    if backend.name == "sqlite":
        parts = []
        for suffix in ("", "-wal", "-journal"):
            path = Path(backend.url + suffix)
            if path.exists():
                parts.append(path.read_bytes().decode("utf-8", "replace"))
        return "\n".join(parts)
    tables = backend.sql(
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = "
        f"'{backend.schema}' AND table_type = 'BASE TABLE'"
    )
    assert len(tables) >= 5, tables  # the test reads tether's tables, not an empty schema
    rows = []
    for (table,) in tables:
        rows += [r[0] for r in backend.sql(f'SELECT t::text FROM "{table}" t')]
    return "\n".join(rows)


def _cli(backend: Backend, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", backend.url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def _absent(planted: dict[str, str], where: str, text: str) -> None:
    found = {k: v for k, v in planted.items() if v in text}
    if found:
        v = next(iter(found.values()))
        i = text.index(v)
        pytest.fail(
            f"{where} holds the planted {sorted(found)}: …{text[max(0, i - 120) : i + 60]}…"
        )


def test_a_planted_secret_is_found_nowhere(backend: Backend) -> None:
    _planted_and_searched(backend, api=False)


def test_a_planted_secret_is_in_no_answer_of_the_http_api(backend: Backend) -> None:
    """Every read of ``tether serve`` (the list, each run's page with all its steps, its
    events, its state after every step, diffs, the inbox, audit, queues, workers, the
    live stream's first frames) holds none of the planted values."""
    _planted_and_searched(backend, api=True)


def _planted_and_searched(backend: Backend, *, api: bool) -> None:
    planted = {
        k: _plant(k)
        for k in ("tool", "var", "approval", "signal", "llm", "error", "agent", "env", "reason")
    }
    # recognised by the default rules only (no Secret anywhere): an OpenAI key in free text,
    # an AWS key id in a step's result, and a password under a credential-named key
    openai_key = "sk-proj-" + secrets.token_hex(20)
    aws_key = "AKIA" + secrets.token_hex(8).upper()
    password = _plant("password")
    patterns = {"openai": openai_key, "aws": aws_key, "password": password}
    os.environ["TETHER_TEST_PLANTED"] = planted["env"]
    received: list[Any] = []
    app = tether.open(backend.url)
    try:

        @app.tool(risk="write", secret=["api_key"], retry=tether.Retry(2, backoff=0, jitter=0))
        def call_api(prompt: str, api_key: str, *, idempotency_key: str) -> dict[str, Any]:
            received.append(api_key)
            if len(received) == 1:  # a client that quotes the key in its error
                raise PermissionError(f"401 for key {api_key}: rejected")
            return {"ok": True, "len": len(api_key)}

        def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
            received.append(messages)
            return {"text": "fine", "usage": {"input_tokens": 3, "output_tokens": 1}}

        @app.agent
        def agent(run: tether.Run, token: tether.Secret) -> Any:
            run.vars["token"] = tether.Secret(planted["var"], name="var")
            run.vars["note"] = f"user pasted {openai_key} in chat"
            run.vars["login"] = {"user": "ann", "password": password}
            run.tool(call_api, "hello", api_key=planted["tool"])
            run.llm(
                "plan",
                model,
                messages=[
                    {"role": "system", "content": tether.Secret(planted["llm"], name="sys")},
                    {"role": "user", "content": f"my key is {openai_key}"},
                ],
            )
            run.step("aws", lambda: f"found {aws_key} in the config")
            run.step("env", lambda t: len(t), token)
            run.approve("send", payload={"to": "bob", "key": tether.Secret(planted["approval"])})
            got = run.wait("creds")
            assert isinstance(got["creds"], tether.Secret) and not got["creds"].revealable
            return {"done": True}

        handle = app.run(agent, token=tether.Secret.env("TETHER_TEST_PLANTED", name="tok"))
        assert handle.status == "waiting"
        app.approve(handle.id, "send", by="alice", reason=f"ok, rotated {openai_key}")
        assert app.resume(handle.id).status == "waiting"
        app.signal(handle.id, "creds", {"creds": tether.Secret(planted["signal"])})
        assert app.resume(handle.id).status == "completed"

        @app.agent
        def leaky(run: tether.Run) -> None:
            secret = tether.Secret(planted["agent"])
            raise RuntimeError(f"could not log in with {secret.reveal()}")

        with pytest.raises(tether.RunFailed) as raised:
            app.run(leaky)
        assert planted["agent"] not in str(raised.value) + repr(raised.value)
        failed = app.runs(agent="leaky")[0].id

        @app.agent
        def failing_step(run: tether.Run) -> None:
            key = tether.Secret(planted["error"])

            def use(k: str) -> None:
                raise ValueError(f"bad key {k}")

            run.step("use", use, key)

        with pytest.raises(tether.RunFailed) as raised:
            app.run(failing_step)
        assert planted["error"] not in str(raised.value) + repr(raised.value)
        step_failed = app.runs(agent="failing_step")[0].id

        # the functions received the values
        assert received[0] == received[1] == planted["tool"]
        assert received[2][0]["content"] == planted["llm"]
        assert received[2][1]["content"] == f"my key is {openai_key}"
        steps = {s.name: s for s in app.get(handle.id).steps}
        assert steps["env"].output == len(planted["env"])
        assert steps["aws"].output == "found [redacted:aws-access-key-id] in the config"

        everything = {**planted, **patterns}
        if api:
            _search_the_api(app, everything, [handle.id, failed, step_failed])
            return
        _absent(everything, f"{backend.name}: the database (open)", _stored_text(backend))
        for rid in (handle.id, failed, step_failed):
            audit = "\n".join(f"{r.type} {r.actor} {r.detail}" for r in app.audit(rid))
            _absent(everything, f"the audit log of {rid}", audit)
            _absent(everything, f"export {rid}", _cli(backend, "export", rid))
            _absent(everything, f"show {rid}", _cli(backend, "show", rid, "--traceback"))
            _absent(everything, f"log {rid}", _cli(backend, "log", rid))
            _absent(everything, f"log --json {rid}", _cli(backend, "log", rid, "--json"))
        # what was stored instead says what was hidden
        log = _cli(backend, "log", handle.id, "--json")
        assert '"$t":"secret"' in log.replace(" ", "") and "[redacted:openai-key]" in log
        assert "[redacted:credential-key]" in log and "[redacted:aws-access-key-id]" in log
        show = _cli(backend, "show", failed)
        assert "could not log in with ***" in show
    finally:
        app.close()
        os.environ.pop("TETHER_TEST_PLANTED", None)
    _absent(everything, f"{backend.name}: the database (closed)", _stored_text(backend))


AGENT = """
import json, os, signal, sys
import tether

app = tether.open(sys.argv[1])
LOG = sys.argv[2]


@app.tool(risk="write", on_doubt="retry")
def charge(amount: int, token: str, *, idempotency_key: str) -> dict:
    with open(LOG, "a") as f:
        f.write(json.dumps({"key": idempotency_key, "token": token,
                            "run": tether.current_step().run_id}) + "\\n")
    if sys.argv[3] == "start":
        os.kill(os.getpid(), signal.SIGKILL)  # a crash after the intent, during the call
    return {"charged": amount}


@app.agent
def pay(run, amount: int, token: tether.Secret) -> dict:
    run.step("prepare", lambda: "ready")
    return run.tool(charge, amount, token)


if sys.argv[3] == "start":
    app.run(pay, 5, tether.Secret.env("PAY_TOKEN", name="pay"))
else:
    print(json.dumps({"status": app.resume(sys.argv[4]).status}))
"""


def test_a_rotated_secret_resumes_in_another_process_with_the_same_key(
    backend: Backend, tmp_path: Path
) -> None:
    script = tmp_path / "pay_agent.py"
    script.write_text(AGENT)
    old, new = _plant("old"), _plant("new")
    calls_log = tmp_path / "calls.jsonl"

    def agent(*args: str, token: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PAY_TOKEN": token}
        return subprocess.run(
            [sys.executable, str(script), backend.url, str(calls_log), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )

    first = agent("start", token=old)
    assert first.returncode == -9, first.stderr
    calls = [json.loads(line) for line in calls_log.read_text().splitlines()]
    rid = calls[0]["run"]
    second = agent("resume", rid, token=new)  # the key was rotated between crash and resume
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"status": "completed"}
    calls = [json.loads(line) for line in calls_log.read_text().splitlines()]
    assert [c["token"] for c in calls] == [old, new]  # each process revealed its own value
    assert calls[0]["key"] == calls[1]["key"]  # the same idempotency key: no nondeterminism
    with tether.open(backend.url) as app:
        assert app.get(rid).output == {"charged": 5}
    _absent({"old": old, "new": new}, "the database", _stored_text(backend))


@pytest.fixture
def rules() -> Any:
    from tether.model import redact

    before = redact.active()
    yield redact
    redact.configure(before)


@pytest.mark.parametrize("risk", ["read", "write"])
def test_a_failed_calls_context_names_its_secret_argument(app: tether.App, risk: str) -> None:
    """The function gets the value; the failure's context, stored with the run, shows the
    argument as the Secret it was given as (its name, never its value)."""
    got: list[str] = []

    @app.tool(risk=risk, secret=["api_key"])
    def look(q: str, api_key: str) -> str:
        got.append(api_key)
        raise PermissionError("401: rejected")

    @app.agent
    def agent(run: tether.Run) -> str:
        return str(run.tool(look, "q", api_key="value-of-the-key"))

    with pytest.raises(tether.RunFailed):
        app.run(agent)
    assert got == ["value-of-the-key"]
    failure = app.get(app.runs(agent="agent")[0].id).failure or {}
    assert failure["input"] == "(['q'], {'api_key': Secret(name='api_key')})"


def test_a_result_holding_a_secret_is_refused_and_a_reference_is_not(app: tether.App) -> None:
    @app.agent
    def leaks(run: tether.Run) -> Any:
        return run.step("fetch", lambda: {"key": tether.Secret("value-of-the-key")})

    with pytest.raises(tether.RunFailed, match=r"step 'fetch''s result holds a tether.Secret"):
        app.run(leaks)
    failed = app.get(app.runs(agent="leaks")[0].id)
    assert "Secret.env('VAR')" in (failed.error or {})["message"]

    @app.agent
    def chooses(run: tether.Run) -> Any:
        return run.decide("which", tether.Secret("value-of-the-key"), why="no")

    with pytest.raises(tether.RunFailed, match=r"decide 'which': the choice holds"):
        app.run(chooses)

    @app.agent
    def refers(run: tether.Run) -> Any:
        ref = run.step("ref", lambda: tether.Secret.env("TETHER_REF", name="r"))
        run.approve("go")
        return repr(ref)

    handle = app.run(refers)
    app.approve(handle.id, "go", by="ann")
    assert app.resume(handle.id).output == "Secret.env('TETHER_REF', name='r')"  # replayed


def test_a_literal_secret_in_a_run_input_is_refused(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run, key: Any) -> None:
        return None

    for start in (lambda: app.run(agent, key=[tether.Secret("abcdefgh")]),
                  lambda: app.start(agent, key={"k": tether.Secret("abcdefgh")})):  # fmt: skip
        with pytest.raises(tether.InvalidInput, match=r"input holds a tether.Secret.*Secret.env"):
            start()
    assert app.runs() == []  # no run was created


def test_secret_parameters_are_wrapped_by_position_and_by_name(app: tether.App) -> None:
    got: list[Any] = []

    @app.tool(risk="read", secret=["token", "extra"])
    def fetch(url: str, token: str | None = None, **extra: Any) -> int:
        got.append((url, token, extra))
        return 1

    @app.agent
    def agent(run: tether.Run) -> None:
        run.tool(fetch, "https://x", "tok-positional")
        run.tool(fetch, "https://x", token=None, extra="tok-keyword")
        run.tool(fetch, "https://x", token=tether.Secret("tok-secret"))

    handle = app.run(agent)
    assert got == [
        ("https://x", "tok-positional", {}),
        ("https://x", None, {"extra": "tok-keyword"}),
        ("https://x", "tok-secret", {}),
    ]
    log = "".join(e.data for e in app.events(handle.id))
    assert "tok-" not in log

    with pytest.raises(tether.InvalidInput, match=r"secret= names 'nope'"):
        app.tool(secret=["nope"])(lambda url: url)

    @app.agent
    def number(run: tether.Run) -> None:
        run.tool(fetch, "https://x", token=12345)

    with pytest.raises(tether.RunFailed, match=r"tool 'fetch': the secret parameter 'token' takes"):
        app.run(number)


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ("token", "secret= is a list of parameter names (secret=['api_key']), not 'token'"),
        (5, "secret= is a list of parameter names (secret=['api_key']), not 5"),
        (["nope"], "secret= names 'nope', which is not one of its parameters (url, token)"),
        ([7], "secret= names 7, which is not one of its parameters (url, token)"),
    ],
)
def test_secret_is_a_list_of_the_tools_parameter_names(
    app: tether.App, secret: Any, says: str
) -> None:
    def fetch(url: str, token: str) -> str:
        return url

    with pytest.raises(tether.InvalidInput) as info:
        app.tool(fetch, risk="read", secret=secret)
    assert str(info.value) == f"tool 'fetch': {says}"

    def call(url: str, **params: Any) -> str:  # takes any name
        return url

    assert app.tool(call, risk="read", secret=["api_key"]).__tether_tool__.secret == {"api_key"}


def test_redaction_can_be_turned_off_and_a_run_recorded_so_replays(
    backend: Backend, rules: Any
) -> None:
    header = {"Authorization": "Bearer " + secrets.token_hex(16)}
    calls: list[str] = []
    with tether.open(backend.url, redact=False) as app:

        @app.tool(risk="write")
        def post(headers: dict[str, str], *, idempotency_key: str) -> str:
            calls.append(idempotency_key)
            return "sent"

        @app.agent
        def agent(run: tether.Run) -> str:
            run.tool(post, header)
            run.approve("more")
            return run.tool(post, header)

        handle = app.run(agent)
        assert header["Authorization"] in "".join(e.data for e in app.events(handle.id))
    with tether.open(backend.url, redact=True) as app:  # the defaults, as after an upgrade
        app.tool(risk="write")(post)
        app.agent(agent)
        app.approve(handle.id, "more", by="ann")
        assert app.resume(handle.id).status == "completed"  # no nondeterminism
        log = "".join(e.data for e in app.events(handle.id))
        assert log.count(header["Authorization"]) == 1  # the first call's intent, from before
        assert '"Authorization":"[redacted:credential-key]"' in log  # the second call's
    assert len(calls) == 2 and calls[0] != calls[1]


def test_an_export_with_secrets_imports_and_resumes_with_the_reference(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setenv("TETHER_IMPORTED", "value-in-this-process")
    seen: list[Any] = []

    @app.agent
    def agent(run: tether.Run, key: tether.Secret) -> int:
        run.vars["literal"] = tether.Secret("not-exported-value")
        run.approve("go", payload={"key": key})
        return run.step("use", lambda k: seen.append(k) or len(k), key)

    handle = app.run(agent, key=tether.Secret.env("TETHER_IMPORTED"))
    out = io.StringIO()
    app.export_run(handle.id, out)
    assert "not-exported-value" not in out.getvalue()
    before = len(app.runs(limit=1000))
    with pytest.raises(ValueError, match=r"'TETHER_IMPORTED'.*--secret-env TETHER_IMPORTED"):
        app.import_run(out.getvalue().splitlines(), new_id=True)  # the file may not choose
    with pytest.raises(ValueError, match="'TETHER_IMPORTED'"):
        app.import_run(out.getvalue().splitlines(), new_id=True, secret_env=["OTHER"])
    assert len(app.runs(limit=1000)) == before  # nothing was written
    lines = out.getvalue().splitlines()
    copy = app.import_run(lines, new_id=True, secret_env=["TETHER_IMPORTED"])
    assert app.get(copy).vars["literal"] == tether.Secret._stored(None)
    app.approve(copy, "go", by="ann")
    assert app.resume(copy).output == len("value-in-this-process")
    assert seen == ["value-in-this-process"]  # the imported reference, revealed here


def _search_the_api(app: tether.App, planted: dict[str, str], ids: list[str]) -> None:
    from fastapi.testclient import TestClient

    from tether.server import create_app

    _, token = app.tokens.create("root", "admin")
    seen: list[str] = []
    with TestClient(create_app(app)) as api:
        api.headers["Authorization"] = f"Bearer {token}"

        def get(path: str) -> None:
            answer = api.get(path)
            assert answer.status_code == 200, (path, answer.text)
            seen.append(path)
            _absent(planted, f"GET {path}", answer.text)

        for path in ("/api/me", "/api/runs", "/api/approvals", "/api/queues", "/api/workers"):
            get(path)
        get("/openapi.json")
        get(f"/api/runs?text={ids[0][:6]}")
        for rid in ids:
            get(f"/api/runs/{rid}?steps_limit=5000")
            get(f"/api/runs/{rid}/events?limit=1000")
            get(f"/api/runs/{rid}/audit")
            get(f"/api/runs/{rid}/state")
            for event in app.events(rid):  # the state at every point of the log
                get(f"/api/runs/{rid}/state?seq={event.seq}")
            with api.stream("GET", f"/api/runs/{rid}/live") as live:  # the log, as frames
                frames = ""
                for line in live.iter_lines():
                    frames += line + "\n"
                    if frames.count("event: run-event") >= len(app.events(rid)):
                        break
            assert frames.count("event: run-event") == len(app.events(rid))
            _absent(planted, f"GET /api/runs/{rid}/live", frames)
        get(f"/api/diff?a={ids[0]}&b={ids[1]}")
        get(f"/api/diff?a={ids[1]}&b={ids[0]}")
    assert len(seen) > 20  # the search read the pages, not nothing
