"""DBOS's child workflows on the fan-out of ``bench/children.py --fanout`` (issue 31).

A parent ``@DBOS.workflow`` enqueues N child workflows (each one ``@DBOS.step`` with the
same body as tether's children, ``children.body``) on a queue and waits for each child's
handle (``get_result``): DBOS's child workflows, recorded in the parent's log. ``WORKERS``
processes launch DBOS on the queue (``worker_concurrency`` 4 each, polling every
``POLL`` seconds, as ``bench/queues.py`` drives DBOS); the driver process, which listens
to no queue, registers the queue and starts the parent. On SQLite a connect hook puts
DBOS's connections in WAL mode with ``synchronous=NORMAL``, tether's default durability.

Driven by ``python bench/children.py --fanout 1000 --workers 4 [--url …]``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig
from sqlalchemy import event

QUEUE = "kids"
POLL = 0.01  # seconds: DBOS's queue polling and the parent's get_result polling
_queue: Any = None  # the registered queue (the driver's)


@event.listens_for(sa.engine.Engine, "connect")
def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    if isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute("PRAGMA synchronous = NORMAL")


def body(i: int) -> dict[str, int]:
    return {"i": i, "square": i * i}  # bench/children.py's body


@DBOS.step()
def work(i: int) -> dict[str, int]:
    return body(i)


@DBOS.workflow()
def kid(i: int) -> int:
    return int(work(i)["square"])


@DBOS.workflow()
def parent(n: int) -> int:
    handles = [_queue.enqueue(kid, i) for i in range(n)]
    return sum(h.get_result(polling_interval_sec=POLL) for h in handles)


def _construct(p: dict[str, Any], executor: str) -> None:
    config: DBOSConfig = {
        "name": "tether-bench-children",
        "system_database_url": p["url"],
        "log_level": "WARNING",
        "executor_id": executor,
        "application_version": "bench",
    }
    if p.get("schema"):
        config["dbos_system_schema"] = p["schema"]
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config=config)


def worker(p: dict[str, Any]) -> None:
    _construct(p, f"worker-{os.getpid()}")
    DBOS.launch()
    print("READY", flush=True)
    sys.stdin.read()  # until the driver closes our stdin
    DBOS.destroy(destroy_registry=False)


def fanout(p: dict[str, Any], n: int, workers: int) -> dict[str, Any]:
    """The whole tree of ``n`` children on ``workers`` worker processes: seconds from the
    parent's start to its result (the workers launched and idle before)."""
    global _queue
    _construct(p, f"driver-{os.getpid()}")
    DBOS.listen_queues([])  # this process executes only the parent
    DBOS.launch()
    _queue = DBOS.register_queue(
        QUEUE, worker_concurrency=4, polling_interval_sec=POLL, on_conflict="always_update"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import sys, children_dbos; children_dbos.worker(__import__('json').loads(sys.argv[1]))"
    cmd = [sys.executable, "-c", code, json.dumps(p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(workers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        time.sleep(2.0)  # as tether's workers get: up and polling
        began = time.perf_counter()
        total = DBOS.start_workflow(parent, n).get_result(polling_interval_sec=POLL)
        elapsed = time.perf_counter() - began
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            proc.wait(60)
        DBOS.destroy(destroy_registry=False)
    assert total == sum(i * i for i in range(n)), total
    return {"seconds": elapsed, "per_s": n / elapsed}
