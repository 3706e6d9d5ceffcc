"""DBOS Transact on its SQLite system database: ``@DBOS.workflow`` + ``@DBOS.step``.

The workflow calls one step per benchmark step. W3's run has a fixed workflow
id; the recovering process constructs DBOS with the same configuration and
calls ``DBOS.launch()``, which finds the PENDING workflow and recovers it in
a background thread (completed steps return their recorded outputs), then
waits for its result.

DBOS leaves SQLite in its default rollback-journal mode with
``synchronous=FULL``: that is the ``shipped`` setting. For ``normal`` and
``full`` a connect hook puts its connections in WAL mode at that synchronous
level, to compare at the same durability as tether and the floor.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SetWorkflowID, WorkflowHandle
from sqlalchemy import event

from common import PragmaLog, body

W3_WORKFLOW = "bench-w3"
_PRAGMAS = PragmaLog()
_DURABILITY = {"value": "shipped"}


@event.listens_for(sa.engine.Engine, "connect")
def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    level = _DURABILITY["value"]
    if level != "shipped":
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute(f"PRAGMA synchronous = {level.upper()}")
    _PRAGMAS.record(dbapi_conn)


@DBOS.step()
def work(k: int) -> dict[str, Any]:
    return body(k)


@DBOS.workflow()
def agent(steps: int) -> int:
    total = 0
    for k in range(1, steps + 1):
        total += work(k)["step"]
    return total


class DBOSSession:
    """DBOS launched on one SQLite system database (recovering pending workflows)."""

    def __init__(self, db: str, durability: str) -> None:
        _DURABILITY["value"] = durability
        config: DBOSConfig = {
            "name": "tether-bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "WARNING",
        }
        logging.getLogger("dbos").setLevel(logging.WARNING)
        DBOS(config=config)
        DBOS.launch()

    def run(self, steps: int) -> int:
        return agent(steps)

    def start_w3(self, steps: int) -> int:
        with SetWorkflowID(W3_WORKFLOW):
            return agent(steps)

    def recover_w3(self) -> int:
        # launch() already handed the PENDING workflow to its recovery thread.
        handle: WorkflowHandle[int] = DBOS.retrieve_workflow(W3_WORKFLOW)
        return int(handle.get_result(polling_interval_sec=0.005))

    def settings(self) -> dict[str, Any]:
        return dict(_PRAGMAS.seen)

    def close(self) -> None:
        DBOS.destroy(destroy_registry=False)


def open_session(db: str, durability: str) -> DBOSSession:
    return DBOSSession(db, durability)
