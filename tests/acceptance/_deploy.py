"""The agent of the rolling-deploy test (test_rolling_deploy.py), at three deployments:
``v1`` (order version 1), ``v12`` (versions 1 and 2 side by side; new runs start as 2),
``v2`` (version 2 only). Version 2 inserts a step ("audit") before the wait: a run of
version 1 that got past "prepare" blocks if version 2's code resumes it.

Every step appends "VERSION N STEP" to $TETHER_TEST_DIR/ledger.txt, so the test reads
which code executed each step of each run, and how many times. A worker process runs
``tether --app _deploy.py:app worker`` with $DEPLOY set to the deployment."""

from __future__ import annotations

import os
from pathlib import Path

import tether


def note(version: str, n: int, step: str) -> str:
    with open(Path(os.environ["TETHER_TEST_DIR"]) / "ledger.txt", "a") as f:
        f.write(f"{version} {n} {step}\n")
    return step


def order_v1(run: tether.Run, n: int) -> str:
    run.step("prepare", note, "1", n, "prepare")
    run.wait("go")
    run.step("ship", note, "1", n, "ship")
    return "shipped by 1"


def order_v2(run: tether.Run, n: int) -> str:
    run.step("prepare", note, "2", n, "prepare")
    run.step("audit", note, "2", n, "audit")
    run.wait("go")
    run.step("ship", note, "2", n, "ship")
    return "shipped by 2"


def make(deploy: str, url: str) -> tether.App:
    """The App of deployment ``deploy`` (v1, v12 or v2) on ``url``."""
    app = tether.open(url, lease_ttl=5.0)
    if deploy in ("v1", "v12"):
        app.agent(name="order", version="1")(order_v1)
    if deploy in ("v12", "v2"):
        app.agent(name="order", version="2")(order_v2)
    return app


if "DEPLOY" in os.environ:
    app = make(os.environ["DEPLOY"], os.environ["TETHER_TEST_DB"])
