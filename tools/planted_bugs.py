"""The bugs issue 35 planted in the core, planted again: each must fail at least one test.

    .venv/bin/python tools/planted_bugs.py          # every bug (a few minutes)
    .venv/bin/python tools/planted_bugs.py key      # the bugs whose name holds "key"

Each bug is a textual change to a copy of this checkout's ``src/`` (the copy is imported
ahead of the installed package through PYTHONPATH, by the tests and by the processes they
start). For each, the tests that pin the guarantee run twice: on the copy as it is (they must
pass: a failure then is not the bug's) and with the bug planted (at least one must fail).
A change whose text is no longer found in the source stops the tool, saying where: the
guarantee moved, and so must this list. The SQL bugs run on the backend whose SQL they
change (PostgreSQL on TETHER_PG_URL, as the conformance suite).

The broad version of this is mutation testing (tools/mutation.sh); this is the issue's
own list, kept runnable so that "the five planted bugs each fail a test" can be checked
again on any commit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Bug:
    name: str
    what: str  # the bug, in the words
    path: str  # under src/tether
    find: str  # the text changed (every occurrence; at least one must exist)
    replace: str
    tests: tuple[str, ...]
    select: str = ""  # pytest -k


SQLITE, PG = "store/sql/sqlite/queries.sql", "store/sql/postgres/queries.sql"
BOUNDARY = ("tests/conformance/test_claim_boundary.py",)
SCAN = "lease_owner IS NULL THEN 0 ELSE lease_expires END) <"


def _lease_bugs() -> list[Bug]:
    out = []
    for backend, sql, now, after in (
        ("sqlite", SQLITE, ":now", " OR lease_owner = :takeover"),
        ("postgres", PG, "%(now)s::float8", "\n       OR lease_owner = %(takeover)s"),
    ):
        for path, find in (
            ("claim", f"lease_expires < {now}{after}"),  # App.resume, decisions, retries
            ("worker's claim scan", f"{SCAN} {now}"),  # claim_next (and claim_fast)
        ):
            for change, to in (
                ("<=", find.replace(" < ", " <= ")),
                ("< now + 5", find.replace(now, f"{now} + 5")),
            ):
                out.append(
                    Bug(
                        f"lease-{backend}-{'scan' if 'scan' in path else 'claim'}-"
                        f"{'le' if change == '<=' else 'plus5'}",
                        f"{backend}: the {path}'s `lease_expires < now` made `{change}`",
                        sql,
                        find,
                        to,
                        BOUNDARY,
                        select=backend,
                    )
                )
    return out


BUGS = [
    Bug(
        "replay-args",
        "replay no longer compares a tool call's arguments with the recorded ones",
        "model/steps.py",
        'out["args"] = (rec.input_digest, digest)',
        "pass",
        ("tests/conformance/test_replay_guards.py", "tests/conformance/test_replay.py"),
    ),
    *_lease_bugs(),
    Bug(
        "snapshot-key",
        "a snapshot drops a tool step's idempotency key",
        "model/steps.py",
        'out["errors"] = list(s.errors)\n',
        'out["errors"] = list(s.errors)\n    out.pop("key")\n',
        (
            "tests/conformance/test_replay_guards.py",
            "tests/conformance/test_snapshot_pages.py",
            "tests/conformance/test_log_machine.py",
        ),
    ),
    Bug(
        "key-hash",
        "the idempotency key's hash cut to 4 hex characters",
        "engine/calls.py",
        "{digest[:16]}",
        "{digest[:4]}",
        ("tests/conformance/test_replay_guards.py", "tests/acceptance/test_effects.py"),
    ),
    Bug(
        "effects-dedup",
        "a repeated key no longer returns the effects table's recorded result",
        "engine/effects.py",
        "    effect = j.store.get_effect(key)\n",
        "    return None\n    effect = j.store.get_effect(key)\n",
        ("tests/conformance/test_replay_guards.py", "tests/acceptance/test_effects.py"),
    ),
]


def _pytest(src: Path, bug: Bug) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "TETHER_NO_SHRINK": "1"}
    env.pop("TETHER_SKIP_PG", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
        "-rf",
        *bug.tests,
    ] + (["-k", bug.select] if bug.select else [])
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def _imports_from(src: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    where = subprocess.run(
        [sys.executable, "-c", "import tether; print(tether.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(src)):
        sys.exit(
            f"planted_bugs: the tests would import tether from {where}, not the copy in "
            f"{src}; is PYTHONPATH overridden by an install that is not editable?"
        )


def main(argv: list[str]) -> int:
    bugs = [b for b in BUGS if not argv or any(a in b.name for a in argv)]
    if not bugs:
        sys.exit(
            f"planted_bugs: no bug matches {argv}; the names: " + ", ".join(b.name for b in BUGS)
        )
    caught = 0
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
        _imports_from(src)
        for bug in bugs:
            target = src / "tether" / bug.path
            text = target.read_text()
            n = text.count(bug.find)
            if n == 0:
                sys.exit(
                    f"planted_bugs: {bug.name}: {bug.find!r} is no longer in "
                    f"src/tether/{bug.path}; find where the guarantee moved and update BUGS"
                )
            rc, out, took = _pytest(src, bug)
            if rc != 0:
                print(out[-3000:])
                sys.exit(f"planted_bugs: {bug.name}: the tests fail without the bug (rc={rc})")
            target.write_text(text.replace(bug.find, bug.replace))
            try:
                rc, out, took_planted = _pytest(src, bug)
            finally:
                target.write_text(text)
            failed = re.findall(r"^FAILED (\S+)", out, flags=re.M)
            ok = rc == 1 and bool(failed)
            caught += ok
            print(
                f"{'caught' if ok else 'MISSED'}  {bug.name}: {bug.what} "
                f"({n} place{'s' * (n > 1)} in src/tether/{bug.path})"
            )
            print(
                f"        {'fails ' + failed[0] if failed else f'pytest rc={rc}'}"
                f"  [clean {took:.0f} s, planted {took_planted:.0f} s]"
            )
            if not ok and rc not in (0, 1):
                print(out[-2000:])
    print(f"{caught} of {len(bugs)} planted bugs caught")
    return 0 if caught == len(bugs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
