"""The bad-input suite, CLI half (issue 25, point 12): `tether` as a real process.

Garbage for every option and argument of every command. Each case counts as
**clear** when the process exits 2 (a usage error) or 1 (a tether error about the
data, such as an unknown run) with exactly one ``error:`` line on stderr that names
the option or the thing, and no traceback; else as **other** (a traceback, an
"unexpected" error, a crash, a hang, or a success where it should have refused).
The counts are printed and the test fails if any case is "other". The API half is
tests/conformance/test_bad_input_suite.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

BIG = str(2**64)
LONG = "x" * 100_000  # one argv entry may hold 128 KB on Linux


@dataclass(frozen=True)
class Case:
    """``args`` (RUN is the id of a completed run), and what the error line must name."""

    args: tuple[str, ...]
    says: str
    stdin: str | None = None


def cases() -> list[Case]:
    c: list[Case] = []
    for v in (BIG, "-1", "0", "x", "1e3"):
        c.append(Case(("runs", "--limit", v), "--limit"))
    c.append(Case(("runs", "--status", "pwned"), "--status"))
    for v in (BIG, "-1", "x", "nan"):
        c += [
            Case(("log", "RUN", "--after", v), "--after"),
            Case(("state", "RUN", "--at", v), "--at"),
            Case(("fork", "RUN", "--at", v), "--at"),
        ]
    c += [
        Case(("state", "RUN", "--step", LONG), "step"),
        Case(("state", "RUN", "--step", "nope"), "no step named"),
        Case(("state", "RUN", "--step", "1", "--when", "later"), "--when"),
        Case(("fork", "RUN", "--input", "{not json"), "--input"),
        Case(("fork", "RUN", "--input", "[1]"), "input"),
        Case(("fork", "RUN", "--var", "novalue"), "--var"),
        Case(("fork", "RUN", "--var", "=1"), "--var"),
        Case(("diff", "RUN@x", "RUN"), "seq"),
        Case(("diff", f"RUN@{BIG}", "RUN"), "at"),
        Case(("diff", "RUN:nope", "RUN"), "no step named"),
    ]
    for v in (BIG, "0", "-1", "x"):
        c.append(Case(("worker", "--concurrency", v), "--concurrency"))
        c.append(Case(("worker", "--max-runs", v), "--max-runs"))
    for v in (BIG, "-1", "many"):
        c.append(Case(("worker", "--prefetch", v), "--prefetch"))
    for v in ("nan", "0", "-1", "inf", "x"):
        c.append(Case(("worker", "--poll", v), "--poll"))
    c += [
        Case(("--app", "agents:app", "worker", "--cpu", "x"), "--cpu"),
        Case(("--app", "agents:app", "worker", "--cpu", BIG), "--cpu"),
        Case(("worker",), "--app"),
    ]
    for v in ("1 parsec", "nan", "-1d", "inf", "1e5", LONG):
        c.append(Case(("gc", "--older-than", v), "--older-than"))
        c.append(Case(("gc", "--status", "completed", "--blob-grace", v), "--blob-grace"))
    for v in (BIG, "-1", "x"):
        c.append(Case(("gc", "--keep-last", v), "--keep-last"))
    c += [Case(("gc",), "--older-than"), Case(("gc", "--status", "pwned"), "--status")]
    for command in ("show", "log", "history", "state", "resume", "retry", "cancel", "export"):
        for run in ("no-such-run", "a\nb", LONG, ""):
            c.append(Case((command, run), "run"))
    c += [
        Case(("approve", "RUN", "ship", "--by", ""), "by"),
        Case(("approve", "RUN", "", "--by", "ann"), "name"),
        Case(("approve", "RUN", "a\nb", "--by", "ann"), "name"),
        Case(("deny", "RUN", "ship", "--by", LONG), "by"),
        Case(("signal", "RUN", "go", "{not json"), "payload"),
        Case(("signal", "RUN", "", "1"), "name"),
        Case(("signal", "RUN", "go", "1", "--sender", "a\nb"), "sender"),
        Case(("resolve", "RUN", "--happened", "--by", "ann", "--result", "{x"), "result"),
        Case(("resolve", "RUN", "--happened", "--by", ""), "by"),
        Case(("cancel", "RUN", "--by", "a\nb"), "by"),
        Case(("export", "RUN", "-o", "/no/such/dir/run.jsonl"), "/no/such/dir"),
        Case(("import", "/no/such/file.jsonl"), "/no/such/file.jsonl"),
        Case(("import", "."), "."),
        Case(("import", "-"), "empty", stdin=""),
        Case(("import", "-"), "not JSON", stdin="\x00\x01garbage\n"),
        Case(("import", "-"), "not a tether run export", stdin='{"a": 1}\n'),
        Case(("import", "-"), "run.id", stdin="HOSTILE"),
        Case(("--db", "DIR", "runs"), "is a directory"),
        Case(("--db", "TEXT", "runs"), "not a tether database"),
        Case(("--db", "postgresql://nobody@127.0.0.1:1/x", "runs"), "PostgreSQL"),
        Case(("--db", "other.db", "--app", "agents:app", "runs"), "--db"),
        Case(("--app", "no-colon", "runs"), "--app"),
        Case(("--app", "nosuchmodule:app", "runs"), "--app"),
        Case(("--app", "agents:nothing", "runs"), "--app"),
        Case(("--code", "a/b.py", "runs"), "--code"),
        Case(("--code", "", "runs"), "--code"),
        Case(("bogus-command",), "invalid choice"),
        Case(("runs", "--bogus"), "--bogus"),
    ]
    return c


def tether_cli(
    args: tuple[str, ...], cwd: Path, env: dict[str, str], stdin: str | None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TETHER_DB", "TETHER_CODE")}
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def judge(case: Case, proc: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    err = proc.stderr
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    if proc.returncode not in (1, 2):
        return "other", f"exit {proc.returncode}: {err[-300:]}"
    if "Traceback" in err or "unexpected" in err:
        return "other", f"a traceback or an unexpected error: {err[-300:]}"
    if len(lines) != 1:
        return "other", f"{len(lines)} error lines: {err[-300:]}"
    if len(lines[0]) > 2000:
        return "other", f"an error line of {len(lines[0])} characters"
    if case.says.lower() not in lines[0].lower():
        return "other", f"does not name {case.says!r}: {lines[0][:300]}"
    return "clear", f"exit {proc.returncode}: {lines[0][:100]}"


AGENTS = textwrap.dedent(
    """
    import os, tether
    app = tether.open(os.environ["AGENTS_DB"])

    @app.agent
    def echo(run, n=1):
        return run.step("s", lambda: n)
    """
)


def test_garbage_for_every_option_gets_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    (tmp_path / "agents.py").write_text(AGENTS)
    (tmp_path / "notes.txt").write_text("hello\n")
    env = {"TETHER_DB": str(db), "AGENTS_DB": str(db), "PYTHONPATH": str(tmp_path)}
    with tether.open(str(db)) as app:

        @app.agent
        def echo(run: tether.Run, n: int = 1) -> int:
            return int(run.step("s", lambda: n))

        run_id = app.run(echo).id
        buf = [line for line in _export(app, run_id)]
    header = json.loads(buf[0])
    header["run"]["id"] = "../../etc/passwd"
    hostile = "\n".join([json.dumps(header), *buf[1:]]) + "\n"
    subs = {"RUN": run_id, "DIR": str(tmp_path), "TEXT": str(tmp_path / "notes.txt")}

    def attempt(case: Case) -> tuple[Case, tuple[str, ...], str, str]:
        args = tuple(_substitute(a, subs) for a in case.args)
        stdin = hostile if case.stdin == "HOSTILE" else case.stdin
        return (case, args, *judge(case, tether_cli(args, tmp_path, env, stdin)))

    with ThreadPoolExecutor(4) as pool:  # processes start while others import tether
        results = list(pool.map(attempt, cases()))
    counts = {k: sum(1 for r in results if r[2] == k) for k in ("clear", "other")}
    with capsys.disabled():
        print(
            f"\nbad-input suite, CLI: tried {len(results)}, clear error {counts['clear']}, "
            f"documented accept 0, other {counts['other']}"
        )
    others = [f"  {' '.join(a)[:80]!r}: {why}" for _, a, o, why in results if o == "other"]
    assert not others, "not a clear error:\n" + "\n".join(others)
    with tether.open(str(db)) as app:  # the garbage changed nothing stored
        assert [r.id for r in app.runs()] == [run_id]
        assert app.get(run_id).status == "completed"


def _export(app: tether.App, run_id: str) -> list[str]:
    from tether.services.export import export_lines

    return list(export_lines(app.store, run_id))


def _substitute(arg: str, subs: dict[str, str]) -> str:
    for key, value in subs.items():
        if arg == key or arg.startswith((f"{key}@", f"{key}:")):
            return value + arg[len(key) :]
    return arg
