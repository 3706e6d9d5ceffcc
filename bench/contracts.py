"""What a contract costs a tool call: a plain write tool, the same tool with a contract
(its annotations and one rule), and a plain read tool against the same read tool with a
contract, inline on SQLite, in one run.

    python bench/contracts.py [--calls 500] [--rounds 5] [--db DIR]

Each round runs an agent of ``--calls`` tool calls per variant, the variants alternating
(median of the rounds). A judged call writes two more events (``tool.proposed`` and
``tool.verdict``) in the transaction of its intent or outcome, never a commit of its own.
Prints µs per call and the ratio of each judged variant to its plain one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import tether

CASES = ("write", "write+contract", "read", "read+contract")


def per_call(db: str, case: str, n: int) -> float:
    app = tether.open(db)
    risk = case.split("+")[0]
    contract = [tether.Rule(lambda v: v <= 500, name="max", arg="amount")] if "+" in case else None

    @app.tool(risk=risk, contract=contract)
    def pay(to: str, amount: int) -> dict[str, Any]:
        return {"paid": amount, "to": to}

    @app.agent
    def agent(run: tether.Run) -> int:
        for i in range(n):
            run.tool(pay, to="bob@example.com", amount=i % 500)
        return n

    try:
        t0 = time.perf_counter()
        app.run(agent)
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        app.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--db", default=None, help="a directory for the databases")
    a = p.parse_args()
    where = Path(a.db or tempfile.mkdtemp(prefix="tether-contracts-"))
    times: dict[str, list[float]] = {c: [] for c in CASES}
    for r in range(a.rounds):
        for c in CASES:
            times[c].append(per_call(str(where / f"{c}-{r}.db"), c, a.calls))
    med = {c: statistics.median(v) for c, v in times.items()}
    print(f"{'case':<16}{'µs/call':>10}{'ratio':>8}")
    for c in CASES:
        base = med[c.split("+")[0]]
        print(f"{c:<16}{med[c]:>10.1f}{med[c] / base:>8.2f}")


if __name__ == "__main__":
    main()
