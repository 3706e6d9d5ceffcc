"""DBOS Transact queues: the anchor of ``bench/queues.py``.

The run is a ``@DBOS.workflow`` calling one ``@DBOS.step`` per step (the same
step body as every other system, ``common.body``). The enqueuing process
registers the queue (DBOS persists a queue's configuration in its system
database) and enqueues every workflow with ``Queue.enqueue`` while listening to
no queue itself, so that it executes nothing. Each worker process constructs
DBOS with its own executor id (two processes sharing the default ``local``
would recover each other's workflows at launch), launches it on the signal to
start, and from then on DBOS's queue thread dequeues and executes workflows
until the driver tells it to stop.

On SQLite a connect hook puts DBOS's connections in WAL mode with
``synchronous=NORMAL``, tether's default durability (DBOS ships with a rollback
journal and FULL, with which several processes block each other's readers).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig
from sqlalchemy import event

from common import body

QUEUE = "bench"


@event.listens_for(sa.engine.Engine, "connect")
def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    if isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute("PRAGMA synchronous = NORMAL")


@DBOS.step()
def work(k: int) -> dict[str, Any]:
    return body(k)


@DBOS.workflow()
def agent(steps: int) -> int:
    total = 0
    for k in range(1, steps + 1):
        total += work(k)["step"]
    return total


def _start(p: dict[str, Any], executor: str) -> None:
    """Construct DBOS on the benchmark's system database (not launched yet)."""
    config: DBOSConfig = {
        "name": "tether-bench-queue",
        "system_database_url": p["url"],
        "log_level": "WARNING",
        "executor_id": executor,
        "application_version": "bench",  # the same in every process: all may dequeue all
    }
    if p.get("schema"):
        config["dbos_system_schema"] = p["schema"]
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config=config)


def enqueue(p: dict[str, Any]) -> None:
    """Register the queue and enqueue ``p["runs"]`` workflows of ``p["steps"]`` steps."""
    _start(p, f"enqueuer-{os.getpid()}")
    DBOS.listen_queues([])  # this process only enqueues
    DBOS.launch()
    queue = DBOS.register_queue(
        QUEUE,
        worker_concurrency=p["concurrency"],
        polling_interval_sec=p["dbos_poll"],
        on_conflict="always_update",
    )
    for _ in range(p["runs"]):
        queue.enqueue(agent, p["steps"])
    DBOS.destroy(destroy_registry=False)


def prepare_worker(p: dict[str, Any]) -> None:
    """Everything before the start signal: import and construct (launching dequeues)."""
    _start(p, f"worker-{os.getpid()}")


def run_worker(p: dict[str, Any], stop: Any) -> dict[str, Any]:
    """Launch (DBOS's queue thread dequeues and executes) until ``stop()`` returns."""
    DBOS.launch()
    stop()
    DBOS.destroy(destroy_registry=False)
    return {}
