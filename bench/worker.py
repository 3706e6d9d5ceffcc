"""One measurement in a fresh process: ``python bench/worker.py SYSTEM TASK PARAMS_JSON``.

``bench/steps.py`` starts one worker per (system, workload, durability), so
that the systems never share a process (DBOS keeps global state; the
libraries' import costs stay out of each other's numbers) and a system that
cannot be imported fails alone. The worker prints one line ``RESULT {json}``.

Tasks: ``w1`` and ``w2`` (timed repeats on fresh files after a warm-up),
``w3-crash`` (start the W3 run; the probe SIGKILLs the process in step
``kill_at``) and ``w3-recover`` (resume it; report monotonic timestamps so the
parent can measure from the moment it spawned this process).
"""

from __future__ import annotations

import time

T0 = time.monotonic()  # before any import: the recovering process's own start

import importlib  # noqa: E402 - T0 must be taken first
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from common import PROBE, Session, db_bytes, expected_total, remove_db  # noqa: E402

Opener = Callable[[str, str], Session]


def _opener(system: str) -> Opener:
    module = importlib.import_module(f"sys_{system}")
    opener: Opener = module.open_session
    return opener


def _check(system: str, got: int, steps: int) -> None:
    if got != expected_total(steps):
        raise RuntimeError(
            f"{system}: a run of {steps} steps returned {got}, expected {expected_total(steps)}"
        )


def _warm_up(open_session: Opener, p: dict[str, Any]) -> None:
    db = os.path.join(p["dir"], "warm.db")
    remove_db(db)
    session = open_session(db, p["durability"])
    for _ in range(3):
        session.run(20)
    session.close()
    remove_db(db)


def _empty_bytes(open_session: Opener, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The size of a freshly initialised store, and the settings it runs with."""
    db = os.path.join(p["dir"], "empty.db")
    remove_db(db)
    session = open_session(db, p["durability"])
    settings = session.settings()
    session.close()
    size = db_bytes(db)
    remove_db(db)
    return size, settings


def task_w1(system: str, p: dict[str, Any]) -> dict[str, Any]:
    open_session = _opener(system)
    empty, settings = _empty_bytes(open_session, p)
    _warm_up(open_session, p)
    steps, seconds = p["steps"], []
    storage: dict[str, Any] = {}
    for r in range(p["repeats"]):
        db = os.path.join(p["dir"], f"w1-{r}.db")
        remove_db(db)
        session = open_session(db, p["durability"])
        t = time.perf_counter()
        got = session.run(steps)
        seconds.append(time.perf_counter() - t)
        _check(system, got, steps)
        if r == p["repeats"] - 1:
            if hasattr(session, "storage"):
                storage = session.storage(steps)
            session.close()
            storage["db_bytes_per_step"] = (db_bytes(db) - empty) / steps
        else:
            session.close()
        remove_db(db)
    return {"seconds": seconds, "steps": steps, "settings": settings, "storage": storage}


def task_w2(system: str, p: dict[str, Any]) -> dict[str, Any]:
    open_session = _opener(system)
    _, settings = _empty_bytes(open_session, p)
    _warm_up(open_session, p)
    seconds = []
    for r in range(p["repeats"]):
        db = os.path.join(p["dir"], f"w2-{r}.db")
        remove_db(db)
        session = open_session(db, p["durability"])
        t = time.perf_counter()
        for _ in range(p["runs"]):
            got = session.run(p["steps"])
        seconds.append(time.perf_counter() - t)
        _check(system, got, p["steps"])
        session.close()
        remove_db(db)
    return {"seconds": seconds, "runs": p["runs"], "steps": p["steps"], "settings": settings}


def task_w3_crash(system: str, p: dict[str, Any]) -> dict[str, Any]:
    open_session = _opener(system)
    PROBE.mode, PROBE.kill_at = "crash", p["kill_at"]
    session = open_session(p["db"], p["durability"])
    session.start_w3(p["steps"])
    raise RuntimeError(f"{system}: the W3 run finished instead of being killed")


def task_w3_recover(system: str, p: dict[str, Any]) -> dict[str, Any]:
    # The probe is armed before the session opens: DBOS starts recovering in launch().
    PROBE.mode, PROBE.kill_at = "record", p["kill_at"]
    open_session = _opener(system)
    imported = time.monotonic()
    session = open_session(p["db"], p["durability"])
    opened = time.monotonic()
    got = session.recover_w3()
    done = time.monotonic()
    _check(system, got, p["steps"])
    session.close()
    return {
        "t0": T0,
        "imported": imported,
        "opened": opened,
        "first_at": PROBE.first_at,
        "first_step": PROBE.first_step,
        "done": done,
        "executed": PROBE.executed,
        "re_executed": PROBE.re_executed,
    }


TASKS = {"w1": task_w1, "w2": task_w2, "w3-crash": task_w3_crash, "w3-recover": task_w3_recover}


def main(argv: list[str]) -> int:
    system, task, params = argv[1], argv[2], json.loads(argv[3])
    try:
        result = TASKS[task](system, params)
    except ImportError as e:
        result = {"error": f"cannot import {e.name or e}: {e}", "missing": True}
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
