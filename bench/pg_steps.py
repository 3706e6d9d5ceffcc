"""A tether step on PostgreSQL: its latency against the floor, and what it sends and commits.

    python bench/pg_steps.py latency '{"url": "postgresql://…/db", "schema": "s1", …}'
    python bench/pg_steps.py counts  '{"url": "postgresql://…/db", "schema": "s2", …}'

``bench/queues.py`` runs both (each in a fresh process) and reports them.

**latency**: one run of ``steps`` sequential steps through ``app.run`` on
``tether.open("postgresql://…")``, beside the floor of ``pg_append_floor.py``
(one prepared 1 KB ``INSERT`` per step on an autocommit connection: one round
trip and one commit, the server's default ``synchronous_commit``) and, for
information, ``PostgresStore.append`` of one 1 KB event alone. The three
alternate within each round, so background load hits all of them alike.

**counts**: every connection psycopg opens in the process (the pool's, the
LISTEN connection) gets a libpq protocol trace (``PQtrace``). A *round trip* is
a batch of messages the client sends before it reads the server's reply: in the
trace, a run of ``F`` (frontend) lines followed by a ``B`` (backend) line. A
pipeline of several statements is one round trip; a notification that arrives
unasked is none. A *statement* is a ``CommandComplete``. *Commits* are the
database's ``xact_commit`` in ``pg_stat_database``, read once every backend of
the (dedicated) database has exited, which flushes its statistics; read-only
transactions count too. Each quantity is measured at two sizes, and the
difference divided by the difference of sizes is the cost per step (or per run):
opening the store, migrations checks and closing cancel out.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq, sql

import queue_tether
import tether
from common import PG_ADMIN_URL as ADMIN_URL
from common import body
from pg_append_floor import floor_writer, per_op_us, tether_writer
from tether.store.pgwire import WireConnection


def open_app(url: str, schema: str) -> tuple[tether.App, Any]:
    """The benchmark agent (queue_tether's: 1 KB steps) on ``schema`` of ``url``."""
    return queue_tether.open_app(f"{url}?schema={schema}")


# -- latency -------------------------------------------------------------------


def latency(p: dict[str, Any]) -> dict[str, Any]:
    """µs per step of tether's ``app.run``, the floor and ``store.append``, per round."""
    steps, url, schema = p["steps"], p["url"], p["schema"]
    app, agent = open_app(url, schema)
    conn, floor = floor_writer(url, schema)
    append = tether_writer(app.store, "bench-append", effect=False)  # type: ignore[arg-type]

    def run() -> None:
        app.run(agent, steps)

    kinds: dict[str, Callable[[], float]] = {
        "tether": lambda: per_op_us(run, 1) / steps,
        "floor": lambda: per_op_us(floor, steps),
        "append": lambda: per_op_us(append, steps),
    }
    try:
        app.run(agent, 50)  # warm up: connect, prepare, cache
        per_op_us(floor, 200)
        per_op_us(append, 200)
        out: dict[str, list[float]] = {k: [] for k in kinds}
        names = list(kinds)
        for r in range(p["rounds"]):
            for name in names[r % 3 :] + names[: r % 3]:  # rotate who goes first
                out[name].append(kinds[name]())
    finally:
        app.close()
        conn.close()
    return {"us_per_step": out, "steps": steps}


# -- counts --------------------------------------------------------------------


class Tracer:
    """Trace every psycopg connection (and every libpq connection of tether's group
    commit) opened while active; count from the traces."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.paths: list[str] = []
        self._connect: Any = None
        self._close: Any = None

    def __enter__(self) -> Tracer:
        self._connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
        self._close = psycopg.Connection.close
        tracer = self

        def connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = tracer._connect(cls, *args, **kwargs)
            tracer._trace(conn.pgconn)
            return conn

        def close(conn: Any) -> None:
            if not conn.closed:
                conn.pgconn.untrace()  # flushes libpq's buffered trace stream
            tracer._close(conn)

        # the store's group commit writes on a libpq connection of its own (pgwire)
        self._wire_init, self._wire_close = WireConnection.__init__, WireConnection.close

        def wire_init(wire: Any, conninfo: str) -> None:
            tracer._wire_init(wire, conninfo)
            tracer._trace(wire._pg)

        def wire_close(wire: Any) -> None:
            wire._pg.untrace()
            tracer._wire_close(wire)

        WireConnection.__init__ = wire_init  # type: ignore[method-assign]
        WireConnection.close = wire_close  # type: ignore[method-assign]

        # psycopg.connect is a copy of Connection.connect taken at import: patch both
        psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]
        psycopg.connect = psycopg.Connection.connect
        psycopg.Connection.close = close  # type: ignore[method-assign]
        return self

    def _trace(self, pgconn: Any) -> None:
        path = os.path.join(self.folder, f"conn-{len(self.paths)}.trace")
        self.paths.append(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        pgconn.trace(fd)
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def __exit__(self, *exc: object) -> None:
        WireConnection.__init__ = self._wire_init  # type: ignore[method-assign]
        WireConnection.close = self._wire_close  # type: ignore[method-assign]
        psycopg.Connection.connect = classmethod(self._connect)  # type: ignore[method-assign,assignment]
        psycopg.connect = psycopg.Connection.connect
        psycopg.Connection.close = self._close  # type: ignore[method-assign]

    def take(self) -> dict[str, int]:
        """Round trips, statements and transactions in the traces so far (then forget them)."""
        total = {"round_trips": 0, "statements": 0, "transactions": 0}
        for path in self.paths:
            with open(path, encoding="utf-8", errors="replace") as f:
                for k, v in count_trace(f).items():
                    total[k] += v
            os.remove(path)
        self.paths.clear()
        return total


def count_trace(lines: Iterator[str]) -> dict[str, int]:
    """Round trips, statements and ended transactions in one connection's libpq trace.

    A transaction ends when the server reports it idle again (``ReadyForQuery I``): after
    an autocommit statement, a COMMIT, or a pipeline's Sync.
    """
    out = {"round_trips": 0, "statements": 0, "transactions": 0}
    sending = False
    for line in lines:
        fields = line.rstrip("\n").split("\t")
        if fields[0] == "F":
            sending = True
        elif fields[0] == "B":
            if sending:
                out["round_trips"] += 1
                sending = False
            kind = fields[2] if len(fields) > 2 else ""
            if kind == "CommandComplete":
                out["statements"] += 1
            elif kind == "ReadyForQuery" and fields[-1].strip() == "I":
                out["transactions"] += 1
    return out


def xact_commit(admin: psycopg.Connection[Any], db: str) -> int:
    """The database's committed transactions, once its client backends have all exited."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        busy = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND backend_type = 'client backend'",
            (db,),
        ).fetchone()
        if busy is not None and busy[0] == 0:
            break
        time.sleep(0.02)
    time.sleep(0.05)
    row = admin.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
    ).fetchone()
    assert row is not None, f"no database {db!r}"
    return int(row[0])


@contextmanager
def counted(tracer: Tracer, admin: psycopg.Connection[Any], db: str) -> Iterator[dict[str, int]]:
    """Round trips, statements and commits of what the block does (close what it opens)."""
    out: dict[str, int] = {}
    tracer.take()
    before = xact_commit(admin, db)
    yield out
    out["commits"] = xact_commit(admin, db) - before
    out.update(tracer.take())


def per_unit(
    small: dict[str, int], big: dict[str, int], n_small: int, n_big: int
) -> dict[str, float]:
    return {k: (big[k] - small[k]) / (n_big - n_small) for k in big}


def count_floor(tracer: Tracer, admin: Any, p: dict[str, Any], n: int) -> dict[str, int]:
    with counted(tracer, admin, p["db"]) as out:
        conn = psycopg.connect(p["url"], autocommit=True, prepare_threshold=0)
        table = sql.Identifier(p["schema"], "floor")
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (k BIGINT, data TEXT)").format(table))
        insert = sql.SQL("INSERT INTO {} (k, data) VALUES (%s, %s)").format(table)
        for k in range(n):
            conn.execute(insert, (k, json.dumps(body(k))))
        conn.close()
    return out


def count_steps(tracer: Tracer, admin: Any, p: dict[str, Any], n: int) -> dict[str, int]:
    with counted(tracer, admin, p["db"]) as out:
        app, agent = open_app(p["url"], p["schema"])
        app.run(agent, n)
        app.close()
    return out


def count_queue(
    tracer: Tracer, admin: Any, p: dict[str, Any], n: int
) -> tuple[dict[str, int], dict[str, int]]:
    """(enqueueing n runs, executing them with one worker of concurrency 1)."""
    with counted(tracer, admin, p["db"]) as enq:
        app, agent = open_app(p["url"], p["schema"])
        for _ in range(n):
            app.start(agent, p["run_steps"], queue="counted")
        app.close()
    with counted(tracer, admin, p["db"]) as ex:
        app, agent = open_app(p["url"], p["schema"])
        stats = app.worker(queues=["counted"], concurrency=1).run(until_idle=True)
        app.close()
    assert stats.completed == n, stats
    return enq, ex


def counts(p: dict[str, Any]) -> dict[str, Any]:
    """Round trips, statements and commits per step, per enqueue and per queued run."""
    small, big = p["count_steps"]
    runs_small, runs_big = p["count_runs"]
    open_app(p["url"], p["schema"])[0].close()  # migrate first: not part of any count
    with (
        tempfile.TemporaryDirectory() as folder,
        Tracer(folder) as tracer,
        psycopg.connect(ADMIN_URL, autocommit=True) as admin,
    ):
        floor = per_unit(
            count_floor(tracer, admin, p, small), count_floor(tracer, admin, p, big), small, big
        )
        step = per_unit(
            count_steps(tracer, admin, p, small), count_steps(tracer, admin, p, big), small, big
        )
        (enq_s, ex_s), (enq_b, ex_b) = (
            count_queue(tracer, admin, p, runs_small),
            count_queue(tracer, admin, p, runs_big),
        )
    return {
        "floor_per_insert": floor,
        "tether_per_step": step,
        "enqueue_per_run": per_unit(enq_s, enq_b, runs_small, runs_big),
        "worker_per_run": per_unit(ex_s, ex_b, runs_small, runs_big),
        "run_steps": p["run_steps"],
        "sizes": {"steps": [small, big], "runs": [runs_small, runs_big]},
    }


def medians(r: dict[str, Any]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in r["us_per_step"].items()}


def main() -> int:
    task, params = sys.argv[1], json.loads(sys.argv[2])
    try:
        result = latency(params) if task == "latency" else counts(params)
    except Exception:
        print("RESULT " + json.dumps({"error": traceback.format_exc()}), flush=True)
        return 1
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
