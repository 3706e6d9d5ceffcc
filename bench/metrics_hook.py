"""What the engine's metrics hook costs per step: off (the default) and on (the
Prometheus recorder of ``tether worker --metrics-port``).

    python bench/metrics_hook.py [--steps 1000] [--rounds 5] [--db PATH]

An agent of ``--steps`` model calls (each reporting usage, so the token and cost
counters move too) runs inline on SQLite, the hook off and on alternating round by
round (median of the rounds). Also measured: the test the engine makes when the hook is
off (``observe.OBSERVER is not None``), per call, against a step's time.

Prints µs per step off and on, their ratio, and the off test's share of a step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import tether
from tether.engine import observe
from tether.services import metrics

REPLY = {"text": "ok", "usage": {"input_tokens": 812, "output_tokens": 57, "cost": 0.0004}}


def steps(db: str, n: int, on: bool) -> float:
    app = tether.open(db)
    if on:
        metrics.registry(app, with_engine=True)

    @app.agent
    def agent(run: tether.Run) -> int:
        for i in range(n):
            run.llm(f"s{i}", lambda: REPLY)
        return n

    try:
        t0 = time.perf_counter()
        app.run(agent)
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        observe.install(None)
        app.close()


def off_test(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        if observe.OBSERVER is not None:
            raise AssertionError("the hook is on")
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--db", help="a directory for the databases (default: a temporary one)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.db or tmp)
        got: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                got[on].append(steps(str(where / f"m{r}{int(on)}.db"), args.steps, on))
    off, on = statistics.median(got[False]), statistics.median(got[True])
    check = off_test(1_000_000)
    print(f"{'hook':<6} {'µs/step':>9}")
    print(f"{'off':<6} {off:>9.1f}")
    print(f"{'on':<6} {on:>9.1f}")
    print(f"on/off: {on / off:.3f}")
    print(f"the off test: {check * 1000:.1f} ns, {check / off:.5%} of a step")


if __name__ == "__main__":
    main()
