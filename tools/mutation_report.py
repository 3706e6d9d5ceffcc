"""The mutation report (tools/mutation_report.md) from mutmut's results and the SQL run.

    .venv/bin/python tools/mutation_report.py [--results SAVED] > tools/mutation_report.md

(``SAVED``: the output of ``mutmut results --all true`` kept from a run.)

Reads ``mutmut results --all true`` (the Python core) and ``mutants/sql_survivors.md``
(written by tools/sql_mutation.py), takes the mutants that
``tools/mutation_equivalent.toml`` records as equivalent (``[python]`` and ``[sql]``:
name = why) out of the count, and prints the score per module, the total, and every
survivor left to triage. Run tools/mutation.sh first.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILLED = {"killed", "timeout", "segfault"}  # a mutant that made the tests fail or hang
SURVIVED = {"survived"}


def _python_results(saved: str | None) -> dict[str, str]:
    """mutmut's verdicts by mutant: live, or from a saved ``mutmut results --all true``."""
    if saved is not None:
        out = Path(saved).read_text()
    else:
        out = subprocess.run(
            [str(ROOT / ".venv/bin/mutmut"), "results", "--all", "true"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    results = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if m:
            results[m.group(1)] = m.group(2).strip()
    return results


def _module(name: str) -> str:
    """``tether.engine.journal.xǁJournalǁslot__mutmut_3`` -> ``tether.engine.journal``."""
    return name.split(".x", 1)[0] if ".x" in name else name.rsplit(".", 1)[0]


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    saved = args[1] if len(args) == 2 and args[0] == "--results" else None
    equivalent_all = tomllib.loads((ROOT / "tools/mutation_equivalent.toml").read_text())
    equivalent = equivalent_all.get("python", {})
    results = _python_results(saved)
    if not results:
        print("no mutmut results: run tools/mutation.sh first", file=sys.stderr)
        return 2
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    survivors = []
    for name, status in sorted(results.items()):
        mod = _module(name)
        if status in KILLED:
            per[mod]["killed"] += 1
        elif status in SURVIVED and name in equivalent:
            per[mod]["equivalent"] += 1
        elif status in SURVIVED:
            per[mod]["survived"] += 1
            survivors.append(name)
        else:  # not checked, no tests, skipped...: reported, never counted as killed
            per[mod][status] += 1
    checked = sum(c["killed"] + c["survived"] + c["no tests"] for c in per.values())
    print("# Mutation report (tools/mutation.sh)\n")
    print("Score = killed / (killed + survived); equivalent mutants are listed with why in")
    print("tools/mutation_equivalent.toml and not counted; 'no tests' means no in-process")
    print("test calls the function (counted as survived).\n")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(f"Generated at commit {head or '?'} from mutmut's results in mutants/.\n")
    print(f"{len(results)} mutants; {checked} checked, the rest not yet run.\n")
    print("| module | killed | survived | no tests | equivalent | not checked | score |")
    print("|---|---|---|---|---|---|---|")
    total = collections.Counter[str]()
    for mod, c in sorted(per.items()):
        total.update(c)
        print(_row(mod, c))
    print(_row("**Python core**", total))
    sql = ROOT / "mutants/sql_survivors.md"
    if sql.exists():
        lines = sql.read_text().splitlines()
        print(f"\n## SQL (tools/sql_mutation.py)\n\n{lines[0]}\n")
        print("\n".join(lines[2:]) or "No survivors.")
    print("\n## Python survivors left to triage\n")
    for name in survivors:
        print(f"- `{name}`")
    return 0


def _row(mod: str, c: collections.Counter[str]) -> str:
    no_tests = c["no tests"]
    counted = c["killed"] + c["survived"] + no_tests
    score = 100.0 * c["killed"] / counted if counted else 100.0
    return (f"| {mod} | {c['killed']} | {c['survived']} | {no_tests} | {c['equivalent']} "
            f"| {c['not checked']} | {score:.1f}% |")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
