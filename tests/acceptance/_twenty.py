"""A 20-step agent run in child processes by test_crash_resume.py.

usage: python _twenty.py DB SIDE_FILE start|resume RUN_ID [--kill-in N] [--kill-after N]
                         [--hold S]
Every executed step body appends its name to SIDE_FILE (one line, fsync'd), so
the test can count executions across processes. With --hold, each step waits (at
most S seconds) until a resume that lost the race for the run says so, by creating
SIDE_FILE.go: the winner is still executing when the loser tries, whatever the speed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import tether
import tether.engine.journal

DB, SIDE = sys.argv[1], sys.argv[2]
KILL_IN = int(sys.argv[sys.argv.index("--kill-in") + 1]) if "--kill-in" in sys.argv else 0
KILL_AFTER = int(sys.argv[sys.argv.index("--kill-after") + 1]) if "--kill-after" in sys.argv else 0
HOLD = float(sys.argv[sys.argv.index("--hold") + 1]) if "--hold" in sys.argv else 0.0
GO = SIDE + ".go"
app = tether.open(DB)
if KILL_AFTER:  # step KILL_AFTER's record must wait for the next call, however slow the disk
    tether.engine.journal.DEFER_BELOW = 60.0


def work(i: int) -> dict[str, int]:
    with open(SIDE, "a") as f:
        f.write(f"step{i}\n")
        f.flush()
        os.fsync(f.fileno())
    if i == KILL_IN:
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + HOLD
    while HOLD and not os.path.exists(GO) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"i": i, "square": i * i}


@app.agent
def twenty(run: tether.Run) -> int:
    total = 0
    for i in range(1, 21):
        total += run.step(f"step{i}", work, i)["square"]
        if i == KILL_AFTER:  # the step returned; the next one has not been called
            os.kill(os.getpid(), signal.SIGKILL)
    return total


if __name__ == "__main__":
    mode = sys.argv[3]
    if mode == "start":
        run_id = sys.argv[4]
        handle = app.run(twenty)
    else:
        try:
            handle = app.resume(sys.argv[4])
        except tether.Conflict as e:
            open(GO, "w").close()  # the winner may go on
            print(f"CONFLICT {e}")
            sys.exit(3)
    print(f"DONE {handle.id} {handle.output}")
