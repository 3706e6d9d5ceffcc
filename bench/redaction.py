"""What redaction costs per step: the default rules against none (not named secrets.py:
run from bench/, that would shadow the standard library's secrets for every script here).

    python bench/redaction.py [--steps 2000] [--rounds 7] [--db PATH]

Redaction runs on every text tether stores and every digest it hashes (see
docs/secrets.md), so it is on the hot path of every step. Measured three ways, the
rules alternating round by round (median of the rounds):

* ``encode``: the codec writing a typical ``step.completed`` event (a dict of a few
  hundred bytes with a model-like output), no credential in it: the fast path;
* ``encode (match)``: the same event with an OpenAI key in its output: the slow path,
  which rewrites the text;
* ``step``: an agent of ``--steps`` steps run inline on SQLite (``synchronous=NORMAL``),
  per step, all included.

Prints µs per call with the default rules and with none, and their ratio (1.00: free).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tether
from tether.model import codec, redact

EVENT = {
    "pos": 12,
    "name": "summarise",
    "kind": "llm",
    "attempt": 1,
    "digest": "9f" * 32,
    "output": {
        "text": "The customer asks for a refund of order 1234; policy allows it within "
        "30 days and the order is 12 days old, so the refund is approved.",
        "usage": {"input_tokens": 812, "output_tokens": 57},
        "model": "gpt-4o-mini",
    },
    "duration": 0.4213,
}
LEAKY = {**EVENT, "output": {**EVENT["output"], "text": "key sk-proj-" + "a1B2c3" * 8}}


def per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def steps(db: str, n: int, rules: bool) -> float:
    app = tether.open(db, redact=rules)

    @app.agent
    def agent(run: tether.Run) -> int:
        total = 0
        for i in range(n):
            total += run.step("add", lambda i=i: {"i": i, "note": "an ordinary result"})["i"]
        return total

    try:
        t0 = time.perf_counter()
        app.run(agent)
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        app.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--db", default=None, help="a directory for the SQLite files")
    args = p.parse_args()
    where = Path(args.db or tempfile.mkdtemp(prefix="tether-bench-secrets-"))
    results: dict[str, dict[bool, list[float]]] = {
        k: {True: [], False: []} for k in ("encode", "encode (match)", "step")
    }
    for r in range(args.rounds):
        for rules in (True, False) if r % 2 == 0 else (False, True):
            redact.configure(rules)
            results["encode"][rules].append(per_call(lambda: codec.encode(EVENT), 20000))
            results["encode (match)"][rules].append(per_call(lambda: codec.encode(LEAKY), 20000))
            db = str(where / f"r{r}-{int(rules)}.db")
            results["step"][rules].append(steps(db, args.steps, rules))
    redact.configure(True)
    print(f"{'':16} {'default rules':>14} {'no rules':>10} {'ratio':>7}")
    for name, by in results.items():
        on, off = statistics.median(by[True]), statistics.median(by[False])
        print(f"{name:16} {on:11.2f} µs {off:7.2f} µs {on / off:7.2f}")


if __name__ == "__main__":
    main()
