"""Fan-out agents run in child processes by test_fanout_crash.py.

usage: python _fanout.py URL LEDGER gather|map start|resume [RUN_ID]
Each branch appends ``start N`` to LEDGER (fsync'd) when it begins and takes long enough
(over DEFER_BELOW) to be recorded when it ends. On ``start``, branch 2 never ends: the
test kills the process once the other branches are committed. ``resume`` prints the
handle as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import tether

URL, LEDGER, MODE, ACTION = sys.argv[1:5]
BRANCHES = 4
app = tether.open(URL)


def _mark(i: int) -> None:
    with open(LEDGER, "a") as f:
        f.write(f"start {i}\n")
        f.flush()
        os.fsync(f.fileno())


def _seconds(i: int) -> float:
    if i == 2 and ACTION == "start":
        return 3600.0  # in flight until the test kills the process
    return 0.1 + 0.05 * (BRANCHES - i) if i < BRANCHES else 0.1  # later items end first


def work(i: int) -> int:
    _mark(i)
    time.sleep(_seconds(i))
    return i * 10


async def awork(i: int) -> int:
    _mark(i)
    await asyncio.sleep(_seconds(i))
    return i * 10


@app.agent
async def gathered(run: tether.AsyncRun) -> list[int]:
    before = await run.step("before", awork, 100)
    fanned = await asyncio.gather(*(run.step(f"b{i}", awork, i) for i in range(BRANCHES)))
    return [before, *fanned, await run.step("after", awork, 200)]


@app.agent
def mapped(run: tether.Run) -> list[int]:
    before = run.step("before", work, 100)
    return [before, *run.map("b", work, range(BRANCHES)), run.step("after", work, 200)]


if __name__ == "__main__":
    agent = gathered if MODE == "gather" else mapped
    if ACTION == "start":
        app.run(agent)
    else:
        h = app.resume(sys.argv[5])
        print(json.dumps({"output": h.output, "reused": h.reused, "executed": h.executed}))
