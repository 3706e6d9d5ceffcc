"""Cost of a durable step: tether against the SQLite floor, LangGraph and DBOS, in one run.

    python bench/steps.py            # full: a few minutes
    python bench/steps.py --quick    # CI smoke run: under a minute, one repeat

Workloads (the same step body and ~1 KB result for every system; see common.py):

W1  one run of 1000 sequential steps -> µs per step
W2  300 runs of 5 steps, one after another in one process -> runs per second
W3  a 1000-step run SIGKILLed inside step 600, resumed by a NEW process -> seconds from
    spawning that process to re-entering the first step body that has to run again
    (step 600), seconds to the run's completion, and step bodies executed again

Durability: ``normal`` is WAL + synchronous=NORMAL for every system (tether's default),
``full`` is synchronous=FULL; ``shipped`` runs the anchors exactly as they come
(LangGraph: WAL + FULL; DBOS: rollback journal + FULL). Every measurement runs in its
own process (bench/worker.py); medians of repeats are reported, as the machine is noisy.
Results go to bench/results/steps.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from common import PAYLOAD_BYTES, git_state, remove_db

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SYSTEMS = ("floor", "tether", "langgraph", "dbos")
ANCHORS = ("langgraph", "dbos")
LABEL = {"floor": "sqlite3 floor", "tether": "tether", "langgraph": "LangGraph", "dbos": "DBOS"}
TARGETS = {"w1_vs_floor": 2.0, "w2_vs_anchors": 10.0, "w3_first_s": 0.3}


@dataclass(frozen=True)
class Plan:
    """Sizes and repeats of one benchmark run.

    The whole schedule runs ``rounds`` times and the samples of all rounds are
    pooled, so a burst of noise from the shared machine hits every system alike
    instead of one system's whole series.
    """

    w1_steps: int = 1000
    w2_runs: int = 300
    w2_steps: int = 5
    w3_steps: int = 1000
    w3_kill_at: int = 600
    rounds: int = 3
    repeats: int = 3  # per round, floor and tether (W1, W2) and tether's W3 trials
    anchor_repeats: int = 1  # per round, LangGraph and DBOS: seconds per repeat
    shipped: bool = True  # also run the anchors with their own SQLite settings

    def repeats_for(self, system: str) -> int:
        return self.anchor_repeats if system in ANCHORS else self.repeats


FULL = Plan()
QUICK = Plan(w2_runs=100, rounds=1, repeats=3, anchor_repeats=1, shipped=False)


# -- running workers ---------------------------------------------------------

# Workers run as installed packages do, with bytecode caches. pip compiles the anchors'
# caches when it installs them, but tether runs from its source tree (an editable
# install): where PYTHONDONTWRITEBYTECODE is set, every tether process would compile
# every module again (~0.25 s on 2 slow cores), and W3's recovery would count it.
WORKER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def call_worker(system: str, task: str, params: dict[str, Any], cwd: str) -> dict[str, Any]:
    """Run one worker process to completion and return its RESULT."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "worker.py"), system, task, json.dumps(params)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=WORKER_ENV,
        timeout=900,
    )
    return parse_result(proc.returncode, proc.stdout, proc.stderr)


def parse_result(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return {"error": f"worker exited with {returncode} without a result: {tail}"}


def samples(values: Iterable[float]) -> dict[str, Any]:
    vals = list(values)
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "samples": vals}


def measure_w1(system: str, durability: str, plan: Plan, tmp: str) -> dict[str, Any]:
    params = {
        "steps": plan.w1_steps,
        "repeats": plan.repeats_for(system),
        "durability": durability,
        "dir": tmp,
    }
    r = call_worker(system, "w1", params, tmp)
    if "error" in r:
        return r
    per_step = [s / r["steps"] * 1e6 for s in r["seconds"]]
    return {"us_per_step": per_step, "settings": r["settings"], "storage": r["storage"]}


def measure_w2(system: str, durability: str, plan: Plan, tmp: str) -> dict[str, Any]:
    params = {
        "runs": plan.w2_runs,
        "steps": plan.w2_steps,
        "repeats": plan.repeats_for(system),
        "durability": durability,
        "dir": tmp,
    }
    r = call_worker(system, "w2", params, tmp)
    if "error" in r:
        return r
    return {"runs_per_s": [r["runs"] / s for s in r["seconds"]], "settings": r["settings"]}


def w3_trial(system: str, durability: str, plan: Plan, tmp: str, n: int) -> dict[str, Any]:
    """Kill a run in step kill_at, then time a fresh process that resumes it."""
    db = os.path.join(tmp, f"w3-{system}-{n}.db")
    remove_db(db)
    params = {
        "steps": plan.w3_steps,
        "kill_at": plan.w3_kill_at,
        "durability": durability,
        "db": db,
    }
    crash = subprocess.run(
        [sys.executable, str(HERE / "worker.py"), system, "w3-crash", json.dumps(params)],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=WORKER_ENV,
        timeout=900,
    )
    if crash.returncode != -9:
        r = parse_result(crash.returncode, crash.stdout, crash.stderr)
        if r.get("missing"):
            return r
        return {"error": f"the crashing process was not killed by SIGKILL: {r.get('error')}"}
    spawned = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "worker.py"), system, "w3-recover", json.dumps(params)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
        env=WORKER_ENV,
    )
    out, err = proc.communicate(timeout=900)
    exited = time.monotonic()
    r = parse_result(proc.returncode, out, err)
    remove_db(db)
    if "error" in r:
        return r
    if r["first_at"] is None:
        return {"error": "the recovering process never entered a step body"}
    return {
        "interpreter_s": r["t0"] - spawned,
        "imported_s": r["imported"] - spawned,
        "opened_s": r["opened"] - spawned,
        "first_step_s": r["first_at"] - spawned,
        "done_s": r["done"] - spawned,
        "exit_s": exited - spawned,
        "first_step": r["first_step"],
        "executed": r["executed"],
        "re_executed": r["re_executed"],
    }


def measure_w3(system: str, durability: str, plan: Plan, tmp: str) -> dict[str, Any]:
    trials = []
    for n in range(plan.repeats_for(system)):
        t = w3_trial(system, durability, plan, tmp, n)
        if "error" in t:
            return t
        trials.append(t)
    return {"trials": trials}


W3_TIMES = ("interpreter_s", "imported_s", "opened_s", "first_step_s", "done_s", "exit_s")


def summarize(workload: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Medians (and min, max, samples) of the samples pooled over all rounds."""
    if "error" in raw:
        return raw
    if workload == "w3":
        trials = raw["trials"]
        out: dict[str, Any] = {k: samples(t[k] for t in trials) for k in W3_TIMES}
        out["re_executed"] = max(t["re_executed"] for t in trials)
        out["executed"] = max(t["executed"] for t in trials)
        out["first_step"] = trials[0]["first_step"]
        return out
    key = "us_per_step" if workload == "w1" else "runs_per_s"
    return {**raw, key: samples(raw[key])}


def pool(into: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Add one round's raw samples to the earlier rounds' (an error sticks)."""
    if into is None or "error" in new:
        return new
    for key in ("us_per_step", "runs_per_s", "trials"):
        if key in new:
            into[key] = into[key] + new[key]
    into.update({k: v for k, v in new.items() if k in ("settings", "storage")})
    return into


# -- the run -----------------------------------------------------------------


Measure = Callable[[str, str, Plan, str], dict[str, Any]]


def schedule(plan: Plan) -> list[tuple[str, str, tuple[str, ...], Measure]]:
    """(workload, durability, systems, measure) in the order they run."""
    todo: list[tuple[str, str, tuple[str, ...], Measure]] = [
        ("w1", "normal", SYSTEMS, measure_w1),
        ("w1", "full", SYSTEMS, measure_w1),
        ("w2", "normal", SYSTEMS, measure_w2),
        ("w3", "normal", ("tether", *ANCHORS), measure_w3),
    ]
    if plan.shipped:
        todo.insert(2, ("w1", "shipped", ANCHORS, measure_w1))
        todo.insert(4, ("w2", "shipped", ANCHORS, measure_w2))
    return todo


def run_all(plan: Plan, only: set[str], tmp: str) -> dict[str, Any]:
    raw: dict[tuple[str, str, str], dict[str, Any]] = {}
    missing: dict[str, str] = {}  # system -> why it cannot be imported
    for rnd in range(1, plan.rounds + 1):
        for workload, durability, systems, measure in schedule(plan):
            for system in systems:
                key = (workload, durability, system)
                if system not in only or system in missing or "error" in raw.get(key, {}):
                    continue
                t = time.perf_counter()
                r = measure(system, durability, plan, tmp)
                took = time.perf_counter() - t
                raw[key] = pool(raw.get(key), r)
                if r.get("missing"):
                    missing[system] = r["error"]
                status = r["error"].splitlines()[0][:100] if "error" in r else "ok"
                where = f"round {rnd}/{plan.rounds}  {workload} {durability:<8} {LABEL[system]:<14}"
                print(f"  {where} {took:6.1f}s  {status}", file=sys.stderr, flush=True)
    results: dict[str, Any] = {"missing": missing}
    for (workload, durability, system), r in raw.items():
        if system in missing:
            continue
        results.setdefault(workload, {}).setdefault(durability, {})[system] = summarize(workload, r)
    return results


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in ("tether", "langgraph", "langgraph-checkpoint-sqlite", "dbos", "sqlalchemy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


# -- reporting ---------------------------------------------------------------


def get(
    results: dict[str, Any], workload: str, durability: str, system: str, *path: str
) -> float | None:
    node: Any = results.get(workload, {}).get(durability, {}).get(system)
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "us":
        return f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    if unit == "s":
        return f"{value:.3f}"
    if unit == "int":
        return f"{value:.0f}"
    if unit == "x":
        return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


ROWS: list[tuple[str, str, str, str, str, bool]] = [
    # label, workload, durability, measure, unit, higher is better
    ("W1 µs/step   NORMAL", "w1", "normal", "us_per_step", "us", False),
    ("W1 µs/step   FULL", "w1", "full", "us_per_step", "us", False),
    ("W1 µs/step   shipped", "w1", "shipped", "us_per_step", "us", False),
    ("W2 runs/s    NORMAL", "w2", "normal", "runs_per_s", "n", True),
    ("W2 runs/s    shipped", "w2", "shipped", "runs_per_s", "n", True),
    ("W3 s to step 600", "w3", "normal", "first_step_s", "s", False),
    ("W3 s to completion", "w3", "normal", "done_s", "s", False),
    ("W3 steps re-run", "w3", "normal", "re_executed", "int", False),
]


def stat_path(measure: str, higher_better: bool, best: bool) -> tuple[str, ...]:
    """Where a row's number is: the median, or the best sample (min time, max rate)."""
    if measure == "re_executed":
        return (measure,)
    return (measure, ("max" if higher_better else "min") if best else "median")


def slower(vals: dict[str, float | None], a: str, b: str, higher_better: bool) -> float | None:
    """How many times more time ``a`` takes than ``b`` (from times, or from rates)."""
    return ratio(vals[b], vals[a]) if higher_better else ratio(vals[a], vals[b])


def table(results: dict[str, Any], *, best: bool = False) -> list[str]:
    """The results table; ratio columns compare time, so > 1 means tether is faster."""
    head = ["", *[LABEL[s] for s in SYSTEMS], "tether/floor", "LangGraph/tether", "DBOS/tether"]
    rows = [head]
    for label, workload, durability, measure, unit, higher_better in ROWS:
        if durability not in results.get(workload, {}):
            continue
        path = stat_path(measure, higher_better, best)
        vals = {s: get(results, workload, durability, s, *path) for s in SYSTEMS}
        if durability == "shipped":  # tether ships with NORMAL; the floor has no default
            vals["tether"] = get(results, workload, "normal", "tether", *path)
        cells = [fmt(vals[s], unit) for s in SYSTEMS]
        if "re-run" in label:
            rows.append([label, *cells, "", "", ""])
            continue

        pairs = (("tether", "floor"), ("langgraph", "tether"), ("dbos", "tether"))
        rows.append(
            [label, *cells, *(fmt(slower(vals, a, b, higher_better), "x") for a, b in pairs)]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return [
        "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
        for r in rows
    ]


def best_table(results: dict[str, Any]) -> list[str]:
    """The same table from each series' best sample, when there are several samples.

    On a shared machine noise only ever adds time, so the best sample is the
    least disturbed one; the gap between the two tables shows how noisy the run was.
    """
    plan = results["meta"]["plan"]
    if plan["rounds"] * plan["repeats"] < 2:
        return []
    return ["best sample (min time, max rate):", *table(results, best=True), ""]


def storage_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    st = get_node(results, "w1", "normal", "tether", "storage")
    if st and "events_per_step" in st:
        lines.append(
            f"tether stores {st['events_per_step']:.3f} events/step, "
            f"{st['event_bytes_per_step']:,.0f} B of event data/step, plus "
            f"{st['snapshot_bytes_per_step']:,.0f} B/step of snapshots "
            f"({st['snapshots']} in a {results['meta']['plan']['w1_steps']}-step run)"
        )
    parts = []
    for s in SYSTEMS:
        b = get(results, "w1", "normal", s, "storage", "db_bytes_per_step")
        if b is not None:
            parts.append(f"{LABEL[s]} {b:,.0f}")
    if parts:
        lines.append("database growth per step (B, W1, after WAL checkpoint): " + ", ".join(parts))
    return lines


def get_node(results: dict[str, Any], *path: str) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def settings_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for durability in ("normal", "full", "shipped"):
        for s in SYSTEMS:
            st = get_node(results, "w1", durability, s, "settings")
            if st:
                desc = ", ".join(f"{k}={v}" for k, v in st.items())
                lines.append(f"  {durability:<8} {LABEL[s]:<14} {desc}")
    return lines


def w3_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for s in ("tether", *ANCHORS):
        r = get_node(results, "w3", "normal", s)
        if not r or "error" in r:
            continue
        m = {
            k: r[k]["median"]
            for k in ("interpreter_s", "imported_s", "opened_s", "first_step_s", "done_s", "exit_s")
        }
        lines.append(
            f"  {LABEL[s]:<10} python up {m['interpreter_s']:.3f}s, imported "
            f"{m['imported_s']:.3f}s, opened {m['opened_s']:.3f}s, in step "
            f"{r['first_step']} at {m['first_step_s']:.3f}s, done {m['done_s']:.3f}s, "
            f"exited {m['exit_s']:.3f}s; {r['executed']} bodies run, "
            f"{r['re_executed']} of them again"
        )
    return lines


def error_lines(results: dict[str, Any]) -> list[str]:
    lines = [
        f"  {LABEL[s]}: NOT INSTALLED ({why}); skipped"
        for s, why in results.get("missing", {}).items()
    ]
    for workload in ("w1", "w2", "w3"):
        for durability, by_system in results.get(workload, {}).items():
            for s, r in by_system.items():
                if "error" in r:
                    first = r["error"].splitlines()[0][:200]
                    lines.append(f"  {LABEL[s]} {workload} {durability}: FAILED: {first}")
    if results.get("missing"):
        lines.append(
            "  install the anchors in a separate venv: "
            "python -m venv .venv-bench && .venv-bench/bin/pip install -e '.[bench]'"
        )
    return lines


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """tether's targets, judged on medians (each with its best-sample value beside it)."""

    def vs(workload: str, measure: str, stat: str, other: str, durability: str) -> float | None:
        mine = get(
            results,
            workload,
            "normal" if durability == "shipped" else durability,
            "tether",
            measure,
            stat,
        )
        return ratio(mine, get(results, workload, durability, other, measure, stat))

    def check(what: str, value: float | None, best: float | None, ok: bool) -> dict[str, Any]:
        return {"what": what, "value": value, "best": best, "met": None if value is None else ok}

    out = []
    most = TARGETS["w1_vs_floor"]
    for d in ("normal", "full"):
        r = vs("w1", "us_per_step", "median", "floor", d)
        out.append(
            check(
                f"W1 {d.upper()}: tether µs/step within {most:.0f}× of the floor's",
                r,
                vs("w1", "us_per_step", "min", "floor", d),
                r is not None and r <= most,
            )
        )
    least = TARGETS["w2_vs_anchors"]
    for d in ("normal", "shipped"):
        for a in ANCHORS:
            r = vs("w2", "runs_per_s", "median", a, d)
            out.append(
                check(
                    f"W2: tether runs/s ≥ {least:.0f}× {LABEL[a]}'s ({d})",
                    r,
                    vs("w2", "runs_per_s", "max", a, d),
                    r is not None and r >= least,
                )
            )
    first = get(results, "w3", "normal", "tether", "first_step_s", "median")
    limit = TARGETS["w3_first_s"]
    out.append(
        check(
            f"W3: tether back in step 600 within {limit} s of spawn",
            first,
            get(results, "w3", "normal", "tether", "first_step_s", "min"),
            first is not None and first <= limit,
        )
    )
    return out


def target_lines(checks: list[dict[str, Any]]) -> list[str]:
    lines = []
    for t in checks:
        verdict = {None: "n/a ", True: "met ", False: "MISS"}[t["met"]]
        unit = "s" if t["what"].startswith("W3") else "x"
        lines.append(
            f"  {verdict} {t['what']}: {fmt(t['value'], unit)} (best sample {fmt(t['best'], unit)})"
        )
    return lines


def report(results: dict[str, Any]) -> str:
    meta = results["meta"]
    v = meta["versions"]
    plan = meta["plan"]
    out = [
        f"tether bench/steps.py — {meta['mode']} mode, {meta['cpus']} CPUs, Python "
        f"{v['python']}, SQLite {v['sqlite']}; tether {v['tether']} ({meta['git']['commit']}"
        f"{', src dirty' if meta['git']['src_dirty'] else ''}, from "
        f"{meta['git']['tether_imported_from']}), LangGraph {v['langgraph']} + "
        f"checkpoint-sqlite {v['langgraph-checkpoint-sqlite']}, DBOS {v['dbos']}",
        f"W1 {plan['w1_steps']} steps · W2 {plan['w2_runs']} runs × {plan['w2_steps']} steps · "
        f"W3 {plan['w3_steps']} steps killed in step {plan['w3_kill_at']} · medians of "
        f"{plan['rounds'] * plan['repeats']} samples (anchors "
        f"{plan['rounds'] * plan['anchor_repeats']}) over {plan['rounds']} interleaved round(s) "
        f"· step result {meta['payload_bytes']} B of JSON",
        "",
        "medians:",
        *table(results),
        "",
        *best_table(results),
        "ratios compare time (µs per step, s per run, s to step 600): > 1 means tether is "
        "faster; in 'shipped' rows tether runs as shipped too (NORMAL)",
        "",
        *storage_lines(results),
        "",
        "W3 recovering process, seconds after it was spawned (medians):",
        *w3_lines(results),
        "",
        "SQLite settings in force (W1):",
        *settings_lines(results),
        "",
        "tether targets:",
        *target_lines(results["targets"]),
    ]
    errors = error_lines(results)
    if errors:
        out += ["", "anchors or workloads that did not run:", *errors]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI mode: one repeat, < 60 s")
    parser.add_argument(
        "--only",
        default=",".join(SYSTEMS),
        help=f"comma-separated systems to run (default: {','.join(SYSTEMS)})",
    )
    parser.add_argument(
        "--out",
        default=str(HERE / "results" / "steps.json"),
        help="where to write the JSON results",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    only = set(args.only.split(","))
    unknown = only - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    if "floor" not in only or "tether" not in only:
        print("note: ratios need both the floor and tether", file=sys.stderr)

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Databases live next to the results, on the repository's filesystem, so fsync
    # costs are the real disk's (a tmpfs /tmp would make FULL look free).
    tmp = tempfile.mkdtemp(prefix="tmp-", dir=out_path.parent)
    started = time.time()
    meta: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "plan": asdict(plan),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "versions": versions(),
        "git": git_state(),
        "payload_bytes": PAYLOAD_BYTES,
        "started": started,
        "loadavg_start": os.getloadavg(),
        "python": sys.executable,
    }
    print(f"running {meta['mode']} benchmark with {sys.executable}", file=sys.stderr)
    try:
        results = run_all(plan, only, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta.update(seconds=time.time() - started, loadavg_end=os.getloadavg())
    results["meta"] = meta
    results["targets"] = targets(results)
    text = report(results)
    print(text)
    results["report"] = text
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"\nwrote {out_path.relative_to(REPO) if out_path.is_relative_to(REPO) else out_path}"
        f" in {meta['seconds']:.0f}s"
    )
    failed_tether = any(
        "error" in by.get("tether", {})
        for w in ("w1", "w2", "w3")
        for by in results.get(w, {}).values()
    )
    return 1 if failed_tether else 0


if __name__ == "__main__":
    sys.exit(main())
