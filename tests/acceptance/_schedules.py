"""A child process of test_schedules_workers.py.

``worker URL``: declare the one-second schedule "ticker" (as every process of an app
does at start) and run a worker until killed or stopped.
``drain URL``: run a worker until no run is left to execute.
"""

from __future__ import annotations

import sys

import tether


def app_of(url: str) -> tether.App:
    app = tether.open(url)

    @app.agent
    def tick(run: tether.Run, label: str) -> str:
        return str(run.step("say", lambda: f"{label} {run.id}"))

    app.schedule(tick, "tick", every="1s", name="ticker", catch_up=True)
    return app


if __name__ == "__main__":
    app = app_of(sys.argv[2])
    if sys.argv[1] == "drain":
        app.worker(poll=0.1).run(until_idle=True)
    else:
        app.worker(poll=0.1, concurrency=4).run()
    app.close()
