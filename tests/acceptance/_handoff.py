"""A giver that hands a ticket off to another agent, for worker processes killed with
SIGKILL between the target's creation and the giver's record of it.

$TETHER_TEST_DB is the database URL; $TETHER_TEST_DIR a directory for the ledger
(ledger.txt: one line per step body of the target, "RUN work", appended with O_APPEND)
and the marker ``killed``. With $TETHER_KILL_AT_HANDOFF set, the first process that
starts a handoff's target kills itself right after the target's commit, before the
giver records its handoff step.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any

import tether

DIR = os.environ["TETHER_TEST_DIR"]
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=2.0)


def _append(line: str) -> None:
    with open(os.path.join(DIR, "ledger.txt"), "a") as ledger:  # one short write: O_APPEND
        ledger.write(line + "\n")


@app.agent
def billing(run: tether.Run, note: str) -> str:
    run.step("work", _append, f"{run.id} work")
    seen = run.session.prompt_view() if run.session is not None else []
    return f"{note} for {run.vars['account']} after {len(seen)} messages"


@app.agent
def triage(run: tether.Run) -> Any:
    run.vars["account"] = "A-17"
    return run.handoff(billing, "refund", vars=["account"], conversation=True)


def _kill_after_the_target_is_created() -> None:
    spawner = app._executor.spawner
    assert spawner is not None

    def start(*args: Any, **kwargs: Any) -> str:
        rid = spawner.start(*args, **kwargs)  # committed: the target exists
        marker = os.path.join(DIR, "killed")
        if kwargs.get("handoff") is not None and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return rid

    app._executor.spawner = dataclasses.replace(spawner, start=start)


if os.environ.get("TETHER_KILL_AT_HANDOFF"):
    _kill_after_the_target_is_created()
