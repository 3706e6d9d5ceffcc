"""tether's run queue: ``app.start`` to enqueue, ``app.worker(...).run()`` to execute.

The run is an ``@app.agent`` calling ``run.step("work", body, k)`` per step
(the same step body as every other system, ``common.body``). The enqueuing
process calls ``app.start`` once per run; each worker process opens the same
store and, on the signal to start, runs
``app.worker(queues=[...], concurrency=N).run(until_idle=True)`` — what
``tether worker --until-idle`` does — which returns once no run is claimable
and none executes.
"""

from __future__ import annotations

import os
from typing import Any

import tether
from common import body

QUEUE = "bench"


def open_app(url: str, **options: Any) -> tuple[tether.App, Any]:
    """The app on ``url`` (``options``: tether.open's) with the benchmark agent registered.

    ``TETHER_BENCH_LINGER`` in the environment sets a PostgreSQL store's ``linger`` (an
    A/B of the group commit's lingering: bench/README.md item 21)."""
    linger = os.environ.get("TETHER_BENCH_LINGER")
    if linger is not None and url.startswith("postgresql"):
        options.setdefault("linger", float(linger))
    app = tether.open(url, **options)

    @app.agent(name="bench")
    def agent(run: tether.Run, steps: int) -> int:
        total = 0
        for k in range(1, steps + 1):
            total += run.step("work", body, k)["step"]
        return total

    return app, agent


def enqueue(p: dict[str, Any]) -> None:
    """Enqueue ``p["runs"]`` runs of ``p["steps"]`` steps."""
    app, agent = open_app(p["url"])
    for _ in range(p["runs"]):
        app.start(agent, p["steps"], queue=QUEUE)
    app.close()


_APP: dict[str, Any] = {}


def prepare_worker(p: dict[str, Any]) -> None:
    """Everything before the start signal: import, open the store, register the agent."""
    _APP["app"], _ = open_app(p["url"])


def run_worker(p: dict[str, Any], stop: Any) -> dict[str, Any]:
    """Claim and execute until the queue is empty; ``stop`` is not needed (until_idle)."""
    app: tether.App = _APP["app"]
    worker = app.worker(queues=[QUEUE], concurrency=p["concurrency"], cpu=p.get("cpu"))
    stats = worker.run(until_idle=True)
    app.close()
    return {"claimed": stats.claimed, "completed": stats.completed, "errors": stats.errors[:3]}
