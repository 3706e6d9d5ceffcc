"""A drafting agent on a budget of model calls, for tests/acceptance/test_budget_workers.py.

The database is $TETHER_TEST_DB; every model call actually made appends a line to
$TETHER_TEST_DB.calls. usage: python _budgets.py start  (prints the queued run's id)
"""

from __future__ import annotations

import os
import sys
from typing import Any

import tether

DB = os.environ["TETHER_TEST_DB"]
app = tether.open(DB, prices={"small-1": tether.Price(input=1.0, output=2.0)})


def small_model(prompt: str) -> dict[str, Any]:
    with open(DB + ".calls", "a") as f:
        f.write(prompt + "\n")
    return {"model": "small-1", "usage": {"input_tokens": 1000, "output_tokens": 500}}


@app.agent(limits=tether.Limits(max_model_calls=2))
def drafts(run: tether.Run, topics: list[str]) -> int:
    for t in topics:
        run.llm(f"draft {t}", small_model, t)
    return len(topics)


if __name__ == "__main__" and sys.argv[1:] == ["start"]:
    print(app.start(drafts, ["a", "b", "c", "d"], limits=tether.Limits(max_cost=0.1)))
