"""A parent that executes its children inline (``run.child(..., inline=True)``), for real
processes killed with SIGKILL at the dangerous points (test_inline_children_crash).

$TETHER_TEST_DB is the database URL; $TETHER_TEST_DIR a directory for the side ledger
(ledger.txt: "RUN started:NAME TOKEN" when a step body is entered, "RUN NAME TOKEN" when
it finished); $TETHER_TEST_STEP the seconds a step body takes; $TETHER_TEST_KILL where
the process kills itself, once (a ``killed`` file marks it done):

- ``first``: inside the first child's first step, before anything of the child is
  written (its creation rides with its first append: engine.births);
- ``mid``: inside the first child's second step (its first step recorded, the child
  unfinished);
- ``after``: in the parent, right after the first child returned (the child's end is
  committed; the parent's record of it is not: it rides with the parent's next append);
- ``single``: ``main`` runs ``single`` instead, whose children are one fast step each
  (each one transaction: engine.births), and is killed in the parent right after its
  first child returned;
- ``batch``: ``main`` runs ``batch`` instead, which starts its children with
  ``run.children`` and is killed right after (the children created, their records not).

``main(["run", N])`` runs a parent of N inline children (``DONE RUN OUTPUT``, or its
status); ``main(["resume", RUN])`` resumes it.
"""

from __future__ import annotations

import os
import secrets
import signal
import time

import tether

DIR = os.environ["TETHER_TEST_DIR"]
KILL = os.environ.get("TETHER_TEST_KILL", "")
STEP = float(os.environ.get("TETHER_TEST_STEP", "0.05"))  # seconds each step body takes
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=2.0)


def _append(line: str) -> None:
    fd = os.open(os.path.join(DIR, "ledger.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _kill_once(point: str) -> None:
    marker = os.path.join(DIR, "killed")
    if point == KILL and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def work(run_id: str, name: str) -> str:
    token = secrets.token_hex(4)
    _append(f"{run_id} started:{name} {token}")
    if run_id.endswith("~1"):
        _kill_once({"work": "first", "more": "mid"}.get(name, ""))
    time.sleep(STEP)
    _append(f"{run_id} {name} {token}")
    return token


@app.agent
def kid(run: tether.Run, i: int) -> int:
    for name in ("work", "more", "last"):
        run.step(name, work, run.id, name)
    return i * i


@app.agent
def parent(run: tether.Run, n: int) -> int:
    total = 0
    for i in range(n):
        total += run.child(kid, i, inline=True)
        _kill_once("after")
    run.step("total", work, run.id, "total")
    return total


@app.agent
def kid1(run: tether.Run, i: int) -> int:
    run.step("work", work, run.id, "work")
    return i * i


@app.agent
def single(run: tether.Run, n: int) -> int:
    total = 0
    for i in range(n):
        total += run.child(kid1, i, inline=True)
        _kill_once("single")
    run.step("total", work, run.id, "total")
    return total


@app.agent
def batch(run: tether.Run, n: int) -> int:
    kids = run.children(kid, range(n))  # one transaction; the records ride with the next
    _kill_once("batch")
    return sum(run.join(kids))


def main(argv: list[str]) -> None:
    """Imported, not run as ``__main__``: the runs record this module as their code."""
    agent = {"batch": batch, "single": single}.get(KILL, parent)
    handle = app.run(agent, int(argv[1])) if argv[0] == "run" else app.resume(argv[1])
    if handle.status == "completed":
        print(f"DONE {handle.id} {handle.output}")
    else:
        print(f"{handle.status.upper()} {handle.id}")
