"""Mutation testing of the stores' SQL: the statements that append, claim and lease.

mutmut mutates Python; the guarantees of a claim or a lease live in SQL text
(``lease_expires < :now``), which it never touches. This tool plants one change at a
time in a named block of ``src/tether/store/sql/<dialect>/queries.sql`` (a comparison
made strict or loose, ``AND``/``OR`` swapped, ``IS NULL`` negated, an order reversed, an
increment changed), runs the store tests of that dialect against a copy of the package
holding the mutant, and counts the mutants the tests kill.

    .venv/bin/python tools/sql_mutation.py [--dialect sqlite|postgres] [--block NAME ...]
                                           [--jobs 2] [--report FILE]

It prints one line per mutant and a total; with ``--report`` it writes the survivors (the
block, the line before and after) as Markdown. Each verdict is kept in ``--state``
(default ``tools/sql_mutation_state.json``, committed) as it comes, with a hash of its
block's text: a later run takes a kept kill as it is while that block is unchanged and
runs the rest (new, changed, survived or stopped before its verdict), so a run stopped at a
session's end goes on in the next. ``--fresh`` runs every mutant again. Triaged
survivors that cannot be told apart by any test (equivalent mutants) are listed, with why,
in ``tools/mutation_equivalent.toml`` under ``[sql]`` and are not counted. PostgreSQL at
``TETHER_PG_URL`` must be reachable for ``--dialect postgres``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The blocks that carry the guarantees: the log, leases and claims, effects, signals.
CORE_BLOCKS = (
    "insert_run", "insert_run_event", "get_run", "append_event", "read_events",
    "update_status", "claim", "release", "renew", "latest_snapshot", "insert_snapshot",
    "get_effect", "put_effect", "send_signal", "wake_for", "pending_signal", "take_signal",
    "request_cancel", "find_dedup", "queue_depth", "claim_candidates", "running_in_queue",
    "claims_since", "claim_picked", "expire_leases",
    # PostgreSQL's names for its own statements, and fragments ({{_name}}) the others share
    "create_run", "load_run", "enqueue", "claim_fast", "append_event_effect",
    "append_event_transition", "append_events_transition", "append_events", "_fenced",
    "_transition", "_logged_moved", "_claimable",
)  # fmt: skip

# The tests a mutant must fail: the store's own, the claim boundary, blocked runs,
# resumes and decisions (signals, approvals), run on one dialect.
TESTS = (
    "tests/conformance/test_store_log.py", "tests/conformance/test_store_queue.py",
    "tests/conformance/test_store_suite.py", "tests/conformance/test_store_posted.py",
    "tests/conformance/test_store_concurrency.py", "tests/conformance/test_claim_boundary.py",
    "tests/conformance/test_blocked.py", "tests/conformance/test_resume_paths.py",
    "tests/conformance/test_decisions.py", "tests/conformance/test_fanout.py",
    "tests/conformance/test_snapshot_pages.py",
)  # fmt: skip

# (pattern, replacement): one occurrence changed per mutant. The patterns see only the
# statement's text after its WHERE/ON/SET keywords where a swap could still parse.
OPERATORS: tuple[tuple[str, str], ...] = (
    (r"(?<![<>!])<(?![=><])", "<="),  # not <<, a shift
    (r"<=", "<"),
    (r"(?<![<>!-])>(?![=>])", ">="),  # not ->> (JSON) nor >>
    (r">=", ">"),
    (r"\bAND\b", "OR"),
    (r"\bOR\b", "AND"),
    (r"\bIS NULL\b", "IS NOT NULL"),
    (r"\bIS NOT NULL\b", "IS NULL"),
    (r"\bDESC\b", "ASC"),
    (r"\bASC\b", "DESC"),
    (r"\+ 1\b", "+ 0"),
    (r"\bNOT IN\b", "IN"),
    (r"(?<!NOT )\bIN \(", "NOT IN ("),
    (r"(?<![<>!:=])=(?!=)", "<>"),
)


@dataclass(frozen=True)
class Mutant:
    """One change to one named block: where it is and what it does."""

    dialect: str
    block: str
    index: int  # the n-th mutant of this block
    start: int  # offset of the change in the file
    before: str
    after: str
    line: str  # the statement's line, mutated
    block_hash: str = ""  # of the block's text: a kept verdict holds while it is unchanged

    @property
    def name(self) -> str:
        return f"{self.dialect}:{self.block}:{self.index}"


def _blocks(text: str) -> dict[str, tuple[int, int]]:
    """``name -> (start, end)`` offsets of each named block's statement in a queries file."""
    heads = list(re.finditer(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE))
    spans = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        spans[head.group(1)] = (head.end(), end)
    return spans


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int, bool]]:
    """The statement's lines that are not comments, after its first WHERE/SET/ON, each
    with whether it is in an UPDATE's SET list (where ``=`` assigns: not mutated)."""
    out = []
    pos = start
    active = assigning = False
    for line in text[start:end].splitlines(keepends=True):
        if not line.strip().startswith("--"):
            ends = re.search(r"\b(WHERE|ON|RETURNING)\b", line) is not None
            sets = re.search(r"\bSET\b", line) is not None
            if re.search(r"\b(WHERE|SET|ON|ORDER BY)\b", line):
                active = True
            if active:  # a line that assigns and then filters is cut at its WHERE later
                out.append((pos, pos + len(line), (assigning or sets) and not (ends and not sets)))
            assigning = (assigning or sets) and not ends
        pos += len(line)
    return out


def mutants(dialect: str, blocks: tuple[str, ...]) -> list[Mutant]:
    """Every mutant of the named blocks of ``dialect``'s queries file, in file order."""
    text = (ROOT / "src/tether/store/sql" / dialect / "queries.sql").read_text()
    spans = _blocks(text)
    found = []
    for block in blocks:
        if block not in spans:
            continue
        index = 0
        digest = hashlib.sha256(text[slice(*spans[block])].encode()).hexdigest()[:16]
        for lo, hi, assigning in _code_spans(text, *spans[block]):
            line = text[lo:hi]
            if assigning and "WHERE" in line:  # "... = x WHERE id = ?": only the WHERE part
                cut = line.index("WHERE")
                lo, line, assigning = lo + cut, line[cut:], False
            for pattern, replacement in OPERATORS:
                if assigning and replacement == "<>":
                    continue
                for m in re.finditer(pattern, line):
                    mutated = line[: m.start()] + replacement + line[m.end() :]
                    at = lo + m.start()
                    found.append(
                        Mutant(
                            dialect,
                            block,
                            index,
                            at,
                            m.group(0),
                            replacement,
                            mutated.strip(),
                            block_hash=digest,
                        )
                    )
                    index += 1
    return found


def _selection(dialect: str) -> str:
    """The tests of ``dialect``: its parametrized cases, and the tests not parametrized by
    backend (a PostgreSQL-only test takes ``pg_backend`` and has no dialect in its id)."""
    other = "postgres" if dialect == "sqlite" else "sqlite"
    return f"{dialect} or not ({other} or pgbouncer)"


def _run(mutant: Mutant, workdir: Path, timeout: float) -> tuple[Mutant, str]:
    """Plant ``mutant`` in a private copy of ``src``, run the tests; 'killed' or 'survived'."""
    src = workdir / "src"
    sql = src / "tether/store/sql" / mutant.dialect / "queries.sql"
    original = (ROOT / "src/tether/store/sql" / mutant.dialect / "queries.sql").read_text()
    planted = (
        original[: mutant.start] + mutant.after + original[mutant.start + len(mutant.before) :]
    )
    sql.write_text(planted)
    env = dict(os.environ, PYTHONPATH=str(src))
    if mutant.dialect == "sqlite":
        env["TETHER_SKIP_PG"] = "1"
    env.pop("TETHER_PGBOUNCER_URL", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
           "-p", "no:randomly", "-k", _selection(mutant.dialect), *TESTS]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=timeout)
        verdict = "survived" if done.returncode == 0 else "killed"
        if done.returncode in (2, 3, 4):  # interrupted, internal or usage error: not a kill
            verdict = f"error ({done.returncode})"
    except subprocess.TimeoutExpired:
        verdict = "killed (timeout)"
    finally:
        sql.write_text(original)
    return mutant, verdict


def _equivalent() -> dict[str, str]:
    path = ROOT / "tools/mutation_equivalent.toml"
    if not path.exists():
        return {}
    data: dict[str, str] = tomllib.loads(path.read_text()).get("sql", {})
    return data


def _load_state(path: Path) -> dict[str, dict[str, str]]:
    """The kept verdicts by mutant name ({} when there are none yet)."""
    if not path.exists():
        return {}
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    return data


def _kept(state: dict[str, dict[str, str]], m: Mutant, equivalent: dict[str, str]) -> str | None:
    """The kept kill of ``m`` (or its survival, while it is recorded as equivalent), if its
    block, place and change are the ones that verdict was given for."""
    kept = state.get(m.name)
    same = kept is not None and (kept["hash"], kept["before"], kept["after"], kept["line"]) == (
        m.block_hash, m.before, m.after, m.line,
    )  # fmt: skip
    if kept is None or not same:
        return None
    if not (
        kept["verdict"].startswith("killed")
        or (kept["verdict"] == "equivalent" and m.name in equivalent)
    ):
        return None
    return kept["verdict"]


def _save_state(path: Path, state: dict[str, dict[str, str]]) -> None:
    """Write ``state`` whole, atomically (a run stopped mid-write keeps the previous one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dialect", choices=["sqlite", "postgres"], action="append")
    parser.add_argument("--block", action="append", help="only this named block (repeatable)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    parser.add_argument("--report", type=Path, help="write the survivors here (Markdown)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument(
        "--state", type=Path, default=ROOT / "tools/sql_mutation_state.json",
        help="where verdicts are kept between runs",
    )  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="run every mutant, kept or not")
    args = parser.parse_args(argv)
    blocks = tuple(args.block or CORE_BLOCKS)
    every = [m for d in (args.dialect or ["sqlite", "postgres"]) for m in mutants(d, blocks)]
    if args.list:
        for m in every:
            print(f"{m.name}\t{m.before} -> {m.after}\t{m.line}")
        return 0
    equivalent = _equivalent()
    state = {} if args.fresh else _load_state(args.state)
    results: list[tuple[Mutant, str]] = []
    todo = []
    for m in every:
        kept = _kept(state, m, equivalent)
        if kept is None:
            todo.append(m)
        else:
            results.append((m, kept))
    print(
        f"{len(every)} mutants: {len(results)} verdicts kept from earlier runs, {len(todo)} to run"
    )
    with tempfile.TemporaryDirectory(prefix="tether-sqlmut-") as tmp:
        dirs = []
        for j in range(args.jobs):
            d = Path(tmp) / str(j)
            shutil.copytree(ROOT / "src", d / "src", ignore=shutil.ignore_patterns("__pycache__"))
            dirs.append(d)
        free = list(dirs)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            pending = set()
            queue = list(todo)
            while queue or pending:
                while queue and free:
                    m = queue.pop(0)
                    d = free.pop()
                    fut = pool.submit(_run, m, d, args.timeout)
                    fut.add_done_callback(lambda _f, d=d: free.append(d))
                    pending.add(fut)
                done, pending = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in done:
                    m, verdict = fut.result()
                    if verdict == "survived" and m.name in equivalent:
                        verdict = "equivalent"
                    results.append((m, verdict))
                    state[m.name] = {
                        "hash": m.block_hash, "before": m.before, "after": m.after,
                        "line": m.line, "verdict": verdict,
                    }  # fmt: skip
                    _save_state(args.state, state)
                    print(
                        f"{verdict:16} {m.name:32} {m.before} -> {m.after}   {m.line}", flush=True
                    )
    return _summary(results, args.report)


def _summary(results: list[tuple[Mutant, str]], report: Path | None) -> int:
    killed = sum(v.startswith("killed") for _, v in results)
    survived = [(m, v) for m, v in results if v == "survived"]
    errors = [(m, v) for m, v in results if v.startswith("error")]
    counted = killed + len(survived)
    score = 100.0 * killed / counted if counted else 100.0
    equivalent = sum(v == "equivalent" for _, v in results)
    print(f"SQL mutants: {len(results)}, killed {killed}, survived {len(survived)}, "
          f"equivalent {equivalent}, errors {len(errors)}; score {score:.1f}%")  # fmt: skip
    if report:
        lines = [f"SQL mutants: {len(results)}, killed {killed}, survived {len(survived)}, "
                 f"equivalent {equivalent}; score {score:.1f}%", ""]  # fmt: skip
        for m, _ in sorted(survived, key=lambda r: r[0].name):
            lines.append(f"- `{m.name}` `{m.before}` -> `{m.after}`: `{m.line}`")
        report.write_text("\n".join(lines) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
