"""The cost of a child run against an inline step, on SQLite (issue 31).

    python bench/children.py            # 200 children per round, 5 rounds
    python bench/children.py --quick    # 50 children, 2 rounds

In one process, on one SQLite file (WAL, synchronous=NORMAL), alternating within each
round so that background load hits both alike:

step    one run of N sequential steps through ``app.run``: µs per step;
child   a parent that starts N children (each one step, the same body) and joins them,
        every run executed by one in-process worker (``app.worker(...).run(until_idle=
        True)``, concurrency 1): µs per child, from the parent's start to its end, over N.
        A child is a queued run: created, claimed, its step, its end, the wake-up of its
        parent, and its share of the parent's replays up to the join.
inline  a parent run through ``app.run`` that calls ``run.child(kid, i, inline=True)`` N
        times (each child executed at once in the parent's thread): µs per child.
mixed   a parent through ``app.run`` that alternates an inline child and a step, N of
        each: µs per child beyond the step it alternates with (the round's mixed time
        minus its step time, over N). An inline child of one fast step is written with its
        parent's next append (engine.births): in ``inline`` that is the parent's last, one
        commit for all N; here it is each next step's, so this is its cost in a flow where
        a commit follows it anyway.
queued  N runs of the same one-step agent started with ``app.start`` and drained by the
        same worker: µs per run. What a child costs beyond a queued run is its link.

    python bench/children.py --fanout 1000 --workers 4 [--url postgresql://…]

fanout  one parent starts 1,000 one-step children and joins them; ``--workers`` real
        ``tether worker`` processes (concurrency 4 each) execute the whole tree: seconds
        from the parent's start to its end, children per second. Then, in the same run and
        on the same database server (or a SQLite file beside tether's), DBOS's child
        workflows on the same workload (bench/children_dbos.py; ``--no-dbos`` skips it),
        and the ratio of the two times; and tether again with the parent starting its
        children in one transaction (``run.children``).

The goal (issue 31): a child at most 3x a step. Medians of the rounds are printed with
the ratio; the numbers go to bench/README.md by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tether


def body(i: int) -> dict[str, int]:
    return {"i": i, "square": i * i}


def build(path: str) -> tuple[tether.App, object, object, object]:
    app = tether.open(path)

    @app.agent
    def steps(run: tether.Run, n: int) -> int:
        return sum(run.step("s", body, i)["square"] for i in range(n))

    @app.agent
    def kid(run: tether.Run, i: int) -> int:
        return int(run.step("s", body, i)["square"])

    @app.agent
    def parent(run: tether.Run, n: int) -> int:
        return sum(run.join([run.child(kid, i) for i in range(n)]))

    @app.agent
    def inline_parent(run: tether.Run, n: int) -> int:
        return sum(run.child(kid, i, inline=True) for i in range(n))

    @app.agent
    def mixed_parent(run: tether.Run, n: int) -> int:
        return sum(run.child(kid, i, inline=True) + run.step("s", body, i)["i"] for i in range(n))

    @app.agent
    def batch_parent(run: tether.Run, n: int) -> int:
        return sum(run.join(run.children(kid, range(n))))

    INLINE[app], BATCH[app], MIXED[app] = inline_parent, batch_parent, mixed_parent
    return app, steps, parent, kid


INLINE: dict[tether.App, object] = {}  # the inline parent of each app built
BATCH: dict[tether.App, object] = {}  # the parent that starts its children in one batch
MIXED: dict[tether.App, object] = {}  # the parent that alternates inline children and steps


def per_step(app: tether.App, steps: object, n: int) -> float:
    began = time.perf_counter()
    handle = app.run(steps, n)  # type: ignore[arg-type]
    assert handle.status == "completed"
    return (time.perf_counter() - began) / n * 1e6


def per_child(app: tether.App, parent: object, n: int) -> tuple[float, int]:
    began = time.perf_counter()
    rid = app.start(parent, n)  # type: ignore[arg-type]
    app.worker(queues=["default"], concurrency=1).run(until_idle=True, install_signals=False)
    elapsed = time.perf_counter() - began
    state = app.get(rid)
    assert state.status == "completed", state.status
    return elapsed / n * 1e6, state.executions


def per_inline(app: tether.App, n: int) -> float:
    began = time.perf_counter()
    handle = app.run(INLINE[app], n)  # type: ignore[arg-type]
    assert handle.status == "completed", handle.status
    return (time.perf_counter() - began) / n * 1e6


def per_mixed(app: tether.App, steps: object, n: int) -> float:
    """µs per inline child beyond the step it alternates with (see the module)."""
    began = time.perf_counter()
    handle = app.run(MIXED[app], n)  # type: ignore[arg-type]
    assert handle.status == "completed", handle.status
    return (time.perf_counter() - began) / n * 1e6 - per_step(app, steps, n)


def per_queued(app: tether.App, kid: object, n: int) -> float:
    began = time.perf_counter()
    for i in range(n):
        app.start(kid, i)  # type: ignore[arg-type]
    app.worker(queues=["default"], concurrency=1).run(until_idle=True, install_signals=False)
    return (time.perf_counter() - began) / n * 1e6


def fanout(url: str, n: int, workers: int, batch: bool = False) -> float:
    """The whole tree of ``n`` children executed by ``workers`` worker processes."""
    import subprocess

    app, _, parent, _ = build(url)
    here = Path(__file__).resolve()
    cmd = [sys.executable, "-m", "tether.cli", "--app", f"{here}:APP", "worker", "--quiet"]
    env = {**os.environ, "BENCH_CHILDREN_URL": url}
    procs = [
        subprocess.Popen([*cmd, "--concurrency", "4"], env=env, stderr=subprocess.PIPE)
        for _ in range(workers)
    ]
    try:
        time.sleep(2.0)  # the workers are up and polling
        began = time.perf_counter()
        rid = app.start(BATCH[app] if batch else parent, n)  # type: ignore[arg-type]
        while app.store.get_run(rid).status not in ("completed", "failed"):
            time.sleep(0.01)
        elapsed = time.perf_counter() - began
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    state = app.get(rid)
    how = "run.children (one batch)" if batch else "run.child each"
    print(f"tether fanout {n} children ({how}), {workers} workers x 4, {url.split('?')[0]}:")
    print(f"  {state.status}")
    print(f"  {elapsed:.2f} s, {n / elapsed:.0f} children/s, parent executions {state.executions}")
    app.close()
    return elapsed


def dbos_fanout(url: str | None, tmp: str, n: int, workers: int) -> float:
    """DBOS's child workflows on the same workload (bench/children_dbos.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import children_dbos

    if url is None:
        p = {"url": f"sqlite:///{Path(tmp) / 'dbos.db'}", "schema": None}
    else:
        schema = f"dbos_{os.getpid()}"
        p = {"url": url.split("?")[0], "schema": schema}
    out = children_dbos.fanout(p, n, workers)
    print(
        f"DBOS fanout {n} child workflows, {workers} workers x 4: {out['seconds']:.2f} s, "
        f"{out['per_s']:.0f} children/s"
    )
    return float(out["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fanout", type=int, metavar="N", help="the fan-out workload instead")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--url", help="the database (default: a SQLite file in a temporary dir)")
    ap.add_argument("--no-dbos", action="store_true", help="fan-out: tether alone, not DBOS")
    args = ap.parse_args()
    if args.fanout:
        print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
        with tempfile.TemporaryDirectory() as tmp:
            t = fanout(args.url or str(Path(tmp) / "fanout.db"), args.fanout, args.workers)
            url = args.url or str(Path(tmp) / "batch.db")
            b = fanout(url.replace("?schema=", "?schema=b"), args.fanout, args.workers, True)
            if not args.no_dbos and importlib.util.find_spec("dbos") is None:
                print("DBOS is not installed (pip install -e '.[bench]'): tether alone")
            elif not args.no_dbos:
                d = dbos_fanout(args.url, tmp, args.fanout, args.workers)
                print(f"tether / DBOS time = {t / d:.2f} (below 1: tether faster)")
                print(f"tether batch / DBOS time = {b / d:.2f}; batch / run.child = {b / t:.2f}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    n, rounds = (50, 2) if args.quick else (200, 5)
    with tempfile.TemporaryDirectory() as tmp:
        app, steps, parent, kid = build(str(Path(tmp) / "children.db"))
        per_step(app, steps, 50)  # warm up
        per_child(app, parent, 10)
        per_queued(app, kid, 10)
        per_inline(app, 10)
        per_mixed(app, steps, 10)
        step_us, child_us, queued_us, inline_us, executions = [], [], [], [], []
        mixed_us: list[float] = []
        for _ in range(rounds):
            step_us.append(per_step(app, steps, n))
            inline_us.append(per_inline(app, n))
            mixed_us.append(per_mixed(app, steps, n))
            queued_us.append(per_queued(app, kid, n))
            us, execs = per_child(app, parent, n)
            child_us.append(us)
            executions.append(execs)
        app.close()
    s, c = statistics.median(step_us), statistics.median(child_us)
    q, i = statistics.median(queued_us), statistics.median(inline_us)
    print(f"python {sys.version.split()[0]}, tether {tether.__version__}, SQLite, n={n}")
    print(f"step   {s:9.1f} µs  (rounds: {', '.join(f'{x:.0f}' for x in step_us)})")
    print(f"child  {c:9.1f} µs  (rounds: {', '.join(f'{x:.0f}' for x in child_us)})")
    print(f"inline {i:9.1f} µs  (rounds: {', '.join(f'{x:.0f}' for x in inline_us)})")
    m = statistics.median(mixed_us)
    print(f"mixed  {m:9.1f} µs  (rounds: {', '.join(f'{x:.0f}' for x in mixed_us)})")
    print(f"queued {q:9.1f} µs  (rounds: {', '.join(f'{x:.0f}' for x in queued_us)})")
    print(f"parent executions per round (wake-ups + 1): {executions}")
    print(f"child / step = {c / s:.2f}  (goal: <= 3); child / queued run = {c / q:.2f}")
    print(f"inline child / step = {i / s:.2f}  (goal: <= 3); inline / queued child = {i / c:.2f}")
    print(f"mixed: inline child beyond its step / step = {m / s:.2f}")


if os.environ.get("BENCH_CHILDREN_URL"):  # a worker process: `tether worker --app`
    APP = build(os.environ["BENCH_CHILDREN_URL"])[0]

if __name__ == "__main__":
    main()
