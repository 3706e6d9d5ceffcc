"""A tree of depth 3 whose runs each book something, for a cancel with compensation
killed with SIGKILL in the middle of the tree's undos.

$TETHER_TEST_DB is the database URL; $TETHER_TEST_DIR a directory for:
- undo.txt: "enter WHAT" when an undo starts and "done WHAT" when it returns;
- $TETHER_KILL_IN_UNDO=WHAT: that undo kills its process once, after "enter" (a file
  ``killed`` remembers it).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import tether

DIR = os.environ["TETHER_TEST_DIR"]
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=2.0)


def _note(line: str) -> None:
    fd = os.open(os.path.join(DIR, "undo.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def unbook(result: Any, what: str, *, idempotency_key: str) -> None:
    _note(f"enter {what}")
    marker = os.path.join(DIR, "killed")
    if os.environ.get("TETHER_KILL_IN_UNDO") == what and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    _note(f"done {what}")


@app.tool(risk="write", compensate=unbook)
def book(what: str, *, idempotency_key: str) -> str:
    return what


@app.agent
def leaf(run: tether.Run, name: str) -> None:
    run.tool(book, name)
    run.wait("never")


@app.agent
def middle(run: tether.Run, name: str) -> None:
    run.tool(book, name)
    run.join([run.child(leaf, f"{name}.leaf")])


@app.agent
def root(run: tether.Run) -> None:
    run.tool(book, "root")
    run.join([run.child(middle, "m1"), run.child(middle, "m2")])
