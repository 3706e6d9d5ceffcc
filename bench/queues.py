"""Many workers, many machines: runs/s through tether's run queue against DBOS queues.

    python bench/queues.py            # full: about 7 minutes on 2 cores
    python bench/queues.py --quick    # CI smoke run: about 60 s, one round, 150 runs

(Not ``bench/queue.py``: a file of that name in ``bench/`` would shadow the standard
library's ``queue`` module for every script in this folder.)

**Throughput.** Runs of 5 steps (each returns the ~1 KB dict of ``common.body``) are
all enqueued first; then 1, 2 or 4 worker processes start at once and execute them,
each with 8 runs at a time (tether: ``app.worker(concurrency=8).run(until_idle=True)``,
what ``tether worker --concurrency 8 --until-idle`` runs; DBOS: a queue with
``worker_concurrency=8``; the floor: each run's 7 rows committed one by one by as many
processes and threads, no queue). On PostgreSQL (every system in its own schema of a database
created for the benchmark) and on SQLite (WAL, ``synchronous=NORMAL``, a file on the
repository's disk). Runs per second = runs ÷ (last run's completion − first run's
claim), both read from the database afterwards, so process start-up is not counted;
seconds from the start signal to the last completion are kept too. Every trial has
fresh processes, a fresh schema or file, and checks that every run completed and no
step ran twice. Trials are interleaved (system, then worker count, then backend) and
the schedule repeats ``rounds`` times, each round starting with the next system (a
trial's place in the sequence moves its result); the tables show medians. Commits per
run (the database's ``xact_commit``) and the workers' CPU time per run are kept too.

**Pinning.** Each worker process runs on one CPU, the same way for every system:
tether's workers pin themselves (``cpu="auto"``, what ``tether worker --cpu auto``
does: the CPU the fewest workers use), DBOS's and the floor's are pinned by
``queue_proc.py`` round robin before they start (worker i on CPU i mod ncpu), so
1, 2 and 4 processes on 2 cores get the same CPUs in every system. A process's
threads then stop passing the GIL between cores. ``--no-pin`` leaves them free.

DBOS polls its queues (default every 1 s; a worker then starts at most
``worker_concurrency`` workflows per poll, which caps it at 8 runs/s). Here it polls
every 10 ms (``--dbos-poll``), which favours DBOS.

**Through PgBouncer** (``--backends postgres,pgbouncer``, or ``pgbouncer`` in the
default ``--backends``): tether alone (the others are not pooler-safe) through a
PgBouncer in transaction mode in front of the same server, started for the run by
``.ci/pgbouncer`` (``TETHER_PGBOUNCER_URL`` points at one already running; its pool
size: ``TETHER_PGBOUNCER_POOL_SIZE``, default 20). tether finds the pooler, so it sends
no prepared statements and its waiting workers poll. The report prints tether's runs/s
through PgBouncer ÷ direct, from the same run (the goal: ≥ 0.8×), and where each run's
CPU went: the workers, the PostgreSQL backends serving the benchmark's database and
PgBouncer (read from /proc while the trial runs). ``--pgbouncer-prepared N`` starts the
pooler with ``max_prepared_statements = N`` (PgBouncer 1.21+: ``TETHER_PGBOUNCER_BIN``
names one, ``bench/pgbouncer_build.sh`` builds 1.24.1) and has tether prepare through it
(``prepare=on``).

**A step on PostgreSQL** (``pg_steps.py``): µs per step of one run of N sequential
steps through ``app.run``, against the floor of one 1 KB INSERT + COMMIT; and round
trips, statements and commits per step, per enqueue and per queued run, counted from
libpq protocol traces and the server's ``xact_commit``.

Results go to bench/results/queue.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from common import PAYLOAD_BYTES, git_state, remove_db
from common import PG_ADMIN_URL as ADMIN_URL

HERE = Path(__file__).resolve().parent
SYSTEMS = ("floor", "tether", "dbos")
BACKENDS = ("postgres", "pgbouncer", "sqlite")
PG_BACKENDS = ("postgres", "pgbouncer")  # one PostgreSQL server, directly or pooled
LABEL = {
    "floor": "floor",
    "tether": "tether",
    "dbos": "DBOS",
    "postgres": "PostgreSQL",
    "sqlite": "SQLite",
    "pgbouncer": "PgBouncer",
}
PGBOUNCER: dict[str, str] = {}  # "url": the PgBouncer the run uses (see pgbouncer())
VERDICT = {None: "n/a ", True: "met ", False: "MISS"}
TARGETS = {"runs_vs_dbos": 10.0, "step_vs_floor": 1.3, "pooled_vs_direct": 0.8}


@dataclass(frozen=True)
class Plan:
    """Sizes and repeats of one benchmark run."""

    runs: int = 1000
    steps: int = 5
    workers: tuple[int, ...] = (1, 2, 4)
    concurrency: int = 8  # runs at once per worker process
    rounds: int = 3
    dbos_poll: float = 0.01
    pin: bool = True  # each worker process on one CPU (tether: --cpu auto; others: the same)
    latency_steps: int = 1000
    latency_rounds: int = 15
    count_steps: tuple[int, int] = (200, 600)
    count_runs: tuple[int, int] = (20, 60)
    timeout: float = 300.0  # per trial
    systems: tuple[str, ...] = SYSTEMS
    backends: tuple[str, ...] = BACKENDS


FULL = Plan()
QUICK = Plan(
    runs=150,
    rounds=1,
    latency_steps=300,
    latency_rounds=3,
    count_steps=(50, 150),
    count_runs=(5, 15),
    timeout=60.0,
)


# -- PostgreSQL ----------------------------------------------------------------


def pg_url(db: str) -> str:
    """The URL of database ``db`` on the server of ADMIN_URL."""
    params = psycopg.conninfo.conninfo_to_dict(ADMIN_URL)
    params["dbname"] = db
    host, port, user = params.get("host", "127.0.0.1"), params.get("port", 5432), params["user"]
    return f"postgresql://{user}@{host}:{port}/{db}"


def pgbouncer_url(db: str) -> str:
    """The URL of database ``db`` through the run's PgBouncer."""
    base = PGBOUNCER["url"]
    return base[: base.rindex("/") + 1] + db


@contextmanager
def pgbouncer() -> Iterator[str]:
    """A PgBouncer in transaction mode for the run: ``TETHER_PGBOUNCER_URL``'s, else one
    started by ``.ci/pgbouncer`` (stopped after)."""
    given = os.environ.get("TETHER_PGBOUNCER_URL")
    if given:
        PGBOUNCER["url"] = given
        yield given
        return
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer runs as postgres when we are root
    try:
        out = subprocess.run(
            [str(HERE.parent / ".ci" / "pgbouncer"), str(folder)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"cannot start PgBouncer: {out.stderr.strip()[-500:]}")
        PGBOUNCER["url"] = out.stdout.strip()
        yield PGBOUNCER["url"]
    finally:
        with suppress(OSError, ValueError):
            os.kill(int((folder / "pgbouncer.pid").read_text()), 15)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def bench_database() -> Iterator[str]:
    """A database of our own (so that pg_stat_database counts only us), dropped after."""
    db = f"tether_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    try:
        yield db
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db))
            )


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_of(pid: int) -> tuple[str, str, float] | None:
    """(name, title, CPU seconds so far) of process ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    return comm, title, (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


class CpuWatch:
    """The CPU seconds that the processes serving database ``db`` spend during a trial:
    PostgreSQL's backends connected to it (their title names the database) and
    PgBouncer. Read from /proc (Linux) every 20 ms while the trial runs: a worker's
    backend ends with the worker, so its last reading is kept (it misses at most the
    backend's last 20 ms). Empty where /proc or the postmaster's pid file is not
    readable."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.postmaster = _postmaster()
        self.poolers = [int(p) for p in _pids() if (_cpu_of(int(p)) or ("",))[0] == "pgbouncer"]

    def _sample(self) -> dict[int, tuple[str, float]]:
        out: dict[int, tuple[str, float]] = {}
        for pid, role in [
            *((p, "server") for p in _children(self.postmaster)),
            *((p, "pooler") for p in self.poolers),
        ]:
            seen = _cpu_of(pid)
            if seen is not None and (role == "pooler" or f" {self.db} " in seen[1]):
                out[pid] = (role, seen[2])
        return out

    def _loop(self) -> None:
        while not self.stop.wait(0.02):
            self.last.update(self._sample())

    def __enter__(self) -> CpuWatch:
        self.first = self._sample()
        self.last = dict(self.first)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.last.update(self._sample())

    def spent(self) -> dict[str, float]:
        """CPU seconds per role (server, pooler) between enter and exit."""
        out = {"server": 0.0, "pooler": 0.0}
        for pid, (role, cpu) in self.last.items():
            out[role] += cpu - self.first.get(pid, (role, 0.0))[1]
        return out


def _pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []


def _postmaster() -> int | None:
    """The PostgreSQL server's main process (its pid file in the data directory)."""
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            row = admin.execute("SHOW data_directory").fetchone()
        with open(os.path.join(str(row[0]) if row else "", "postmaster.pid")) as f:
            return int(f.readline())
    except (OSError, ValueError, psycopg.Error):
        return None


def _children(pid: int | None) -> list[int]:
    if pid is None:
        return []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def xact_commit(db: str, *, settled: bool = False) -> int:
    """The database's committed transactions so far. Backends report theirs at the latest
    when they exit: ``settled`` waits until no client is connected to ``db`` any more."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        deadline = time.monotonic() + 10
        while settled and time.monotonic() < deadline:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND backend_type = 'client backend'",
                (db,),
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.02)
        row = admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
        ).fetchone()
    return int(row[0]) if row else 0


def pg_settings() -> dict[str, str]:
    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay")
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        return {
            n: str(admin.execute(sql.SQL("SHOW {}").format(sql.Identifier(n))).fetchone()[0])
            for n in names
        }  # type: ignore[index]


# -- one trial -------------------------------------------------------------------


@dataclass
class Location:
    """Where one trial's system keeps its state: a PostgreSQL schema or a SQLite file."""

    system: str
    backend: str
    db: str  # PostgreSQL database, or the SQLite file's path
    schema: str = field(default_factory=lambda: f"q_{secrets.token_hex(4)}")

    def params(self) -> dict[str, Any]:
        if self.backend == "sqlite":
            url = f"sqlite:///{self.db}" if self.system == "dbos" else self.db
            return {"url": url, "schema": None}
        if self.system == "tether":
            via = pgbouncer_url if self.backend == "pgbouncer" else pg_url
            url = f"{via(self.db)}?schema={self.schema}"
            if self.backend == "pgbouncer" and PGBOUNCER.get("prepared"):
                url += "&prepare=on"  # the pooler keeps prepared statements (1.21+)
            return {"url": url, "schema": self.schema}
        return {"url": pg_url(self.db), "schema": self.schema}

    def connect(self) -> Any:
        if self.backend == "sqlite":
            return closing(sqlite3.connect(self.db))
        return psycopg.connect(pg_url(self.db), autocommit=True)

    def table(self, name: str) -> str:
        if self.system == "floor":
            name = f"floor_{name}" if not name.startswith("floor_") else name
        return name if self.backend == "sqlite" else f'"{self.schema}".{name}'

    def done(self, conn: Any) -> int:
        """Runs completed so far (one statement)."""
        if self.system == "dbos":
            q = f"SELECT COUNT(*) FROM {self.table('workflow_status')} WHERE status = 'SUCCESS'"
        else:
            q = f"SELECT COUNT(*) FROM {self.table('runs')} WHERE status = 'completed'"
        return int(conn.execute(q).fetchone()[0])

    def progress(self, conn: Any) -> tuple[int, float | None, float | None, int]:
        """(runs completed, first claim, last completion, steps executed), in seconds.

        tether: the first claim and the last completion of a run. DBOS (whose run times
        have whole seconds on SQLite): the first step's start and the last step's end,
        which leave out a run's dequeue and completion writes. The floor's come from its
        workers (None here).
        """
        done = self.done(conn)
        if self.system == "floor":
            q = f"SELECT NULL, NULL, COUNT(*) FROM {self.table('floor_steps')}"
        elif self.system == "tether":
            q = (
                f"SELECT MIN(claimed_at), MAX(updated_at), (SELECT COUNT(*) FROM "
                f"{self.table('events')} WHERE type = 'step.completed') FROM {self.table('runs')}"
            )
        else:
            q = (
                f"SELECT MIN(started_at_epoch_ms) / 1000.0, MAX(completed_at_epoch_ms) / 1000.0, "
                f"COUNT(*) FROM {self.table('operation_outputs')} WHERE function_name LIKE '%work'"
            )
        first, last, executed = conn.execute(q).fetchone()
        return done, _float(first), _float(last), int(executed)

    def drop(self) -> None:
        if self.backend == "sqlite":
            remove_db(self.db)
            return
        with psycopg.connect(pg_url(self.db), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def proc_args(system: str, role: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, str(HERE / "queue_proc.py"), system, role, json.dumps(params)]


def parse_result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    return None


def enqueue(system: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        proc_args(system, "enqueue", params),
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=timeout,
    )
    r = parse_result(proc.stdout)
    if r is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return {"error": f"enqueue exited with {proc.returncode}: {tail}"}
    return r


def pinning(system: str, i: int, plan: Plan) -> dict[str, Any]:
    """How worker process ``i`` is pinned to a CPU: tether pins itself (``cpu="auto"``,
    what ``tether worker --cpu auto`` does: the CPU the fewest workers use), the others
    are pinned by queue_proc.py to the same round-robin CPU before they start."""
    if not plan.pin:
        return {}
    if system == "tether":
        return {"cpu": "auto"}
    cpus = sorted(os.sched_getaffinity(0))
    return {"pin_cpu": cpus[i % len(cpus)]}


def start_workers(system: str, each: list[dict[str, Any]], log: str) -> list[subprocess.Popen[str]]:
    """One worker process per params dict, each READY (prepared) on return. Their stderr
    goes to ``log`` (a pipe nobody reads could fill up and block a chatty worker)."""
    with open(log, "a") as err:
        procs = [
            subprocess.Popen(
                proc_args(system, "worker", params),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=HERE,
            )
            for params in each
        ]
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "READY":
            stop_all(procs)
            with open(log) as f:
                tail = " | ".join(f.read().strip().splitlines()[-3:])
            raise RuntimeError(f"a {system} worker did not get ready: {tail}")
    return procs


def tell(procs: list[subprocess.Popen[str]], word: str) -> None:
    for p in procs:
        with suppress(BrokenPipeError, OSError):
            assert p.stdin is not None
            p.stdin.write(word + "\n")
            p.stdin.flush()


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def wait_done(loc: Location, procs: list[subprocess.Popen[str]], plan: Plan, go: float) -> int:
    """Wait until every run completed (tether workers exit by themselves; DBOS workers
    are told to STOP then); returns how many progress polls hit the database."""
    polls = 0
    with loc.connect() as conn:
        while time.time() - go < plan.timeout:
            if loc.system != "dbos" and all(p.poll() is not None for p in procs):
                break
            if loc.system == "dbos":
                polls += 1
                if loc.done(conn) >= plan.runs:
                    break
            time.sleep(0.05)
    tell(procs, "STOP")
    deadline = time.time() + 60
    for p in procs:
        with suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.time()))
    return polls


def trial(system: str, backend: str, workers: int, plan: Plan, db: str, tmp: str) -> dict[str, Any]:
    """One measurement: enqueue every run, then time ``workers`` fresh worker processes.
    ``db`` is the PostgreSQL database; SQLite files and the workers' logs go in ``tmp``."""
    name = f"{system}-{backend}-{workers}-{secrets.token_hex(3)}"
    where = os.path.join(tmp, f"{name}.db") if backend == "sqlite" else db
    loc = Location(system, backend, where)
    params = {
        **loc.params(),
        "runs": plan.runs,
        "steps": plan.steps,
        "concurrency": plan.concurrency,
        "dbos_poll": plan.dbos_poll,
    }
    try:
        enq = enqueue(system, params, plan.timeout)
        if "error" in enq:
            return enq
        commits_before = xact_commit(db) if backend in PG_BACKENDS else None
        shares = [plan.runs // workers + (i < plan.runs % workers) for i in range(workers)]
        each = [{**params, "share": n, **pinning(system, i, plan)} for i, n in enumerate(shares)]
        procs = start_workers(system, each, os.path.join(tmp, f"{name}.log"))
        watch = CpuWatch(db) if backend in PG_BACKENDS else None
        with watch or nullcontext():
            go = time.time()
            tell(procs, "GO")
            polls = wait_done(loc, procs, plan, go)
        spent = watch.spent() if watch is not None else None
        outs = [p.communicate()[0] if p.poll() is not None else "" for p in procs]
        stop_all(procs)
        results = [parse_result(o) for o in outs]
        commits = None
        if commits_before is not None:  # the progress polls were one transaction each
            commits = xact_commit(db, settled=True) - commits_before - polls
        with loc.connect() as conn:
            done, first, last, executed = loc.progress(conn)
        spans = [(r["first"], r["last"]) for r in results if r and "first" in r]
        if system == "floor" and spans:
            first, last = min(a for a, _ in spans), max(b for _, b in spans)
        summary = summarize_trial(
            plan, workers, enq, results, done, first, last, executed, go, commits
        )
        if spent is not None and "error" not in summary:
            summary["server_cpu_us_per_run"] = spent["server"] / done * 1e6
            summary["pooler_cpu_us_per_run"] = spent["pooler"] / done * 1e6
        return summary
    except (RuntimeError, subprocess.TimeoutExpired, psycopg.Error, sqlite3.Error) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        loc.drop()


def summarize_trial(
    plan: Plan,
    workers: int,
    enq: dict[str, Any],
    results: list[dict[str, Any] | None],
    done: int,
    first: float | None,
    last: float | None,
    executed: int,
    go: float,
    commits: int | None,
) -> dict[str, Any]:
    errors = [r["error"].strip().splitlines()[-1] for r in results if r and "error" in r]
    if None in results:
        errors.append("a worker process exited without a result")
    if done != plan.runs or first is None or last is None:
        said = [
            {k: v for k, v in r.items() if k in ("claimed", "completed", "errors")}
            for r in results
            if r
        ]
        errors.append(f"{done} of {plan.runs} runs completed (workers: {said})")
    if executed != plan.runs * plan.steps:
        errors.append(f"{executed} step executions for {plan.runs * plan.steps} steps")
    if errors:
        return {"error": "; ".join(errors)}
    assert first is not None and last is not None
    cpu = sum(r.get("cpu_s", 0.0) for r in results if r)
    return {
        "runs_per_s": done / (last - first),
        "worker_cpu_us_per_run": cpu / done * 1e6,
        "runs_per_s_from_go": done / (last - go),
        "window_s": last - first,
        "enqueue_per_s": plan.runs / enq["seconds"],
        "commits_per_run": None if commits is None else commits / plan.runs,
        "workers": workers,
        "claimed_by_worker": [r.get("claimed") for r in results if r],
    }


# -- the schedule ----------------------------------------------------------------


def run_throughput(plan: Plan, db: str, tmp: str) -> dict[str, Any]:
    """Every (backend, workers, system) trial, ``rounds`` times, interleaved."""
    samples: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for rnd in range(1, plan.rounds + 1):
        # Each round starts with the next system: on this machine a trial's place in
        # the sequence moves its result, so no system keeps the same place.
        k = (rnd - 1) % len(plan.systems)
        systems = (*plan.systems[k:], *plan.systems[:k])
        for backend in plan.backends:
            for workers in plan.workers:
                for system in systems:
                    if backend == "pgbouncer" and system != "tether":
                        continue  # the others are not pooler-safe: tether alone
                    t = time.perf_counter()
                    r = trial(system, backend, workers, plan, db, tmp)
                    took = time.perf_counter() - t
                    by = samples.setdefault(backend, {}).setdefault(str(workers), {})
                    by.setdefault(system, []).append(r)
                    status = r["error"][:120] if "error" in r else f"{r['runs_per_s']:8.1f} runs/s"
                    print(
                        f"  round {rnd}/{plan.rounds}  {LABEL[backend]:<10} {workers} worker(s) "
                        f"{LABEL[system]:<6} {took:6.1f}s  {status}",
                        file=sys.stderr,
                        flush=True,
                    )
    return {
        b: {w: {s: pool(v) for s, v in ws.items()} for w, ws in by.items()}
        for b, by in samples.items()
    }


def pool(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the trials (the first error, if any trial failed)."""
    errors = [t["error"] for t in trials if "error" in t]
    if errors:
        return {"error": errors[0], "trials": trials}
    out: dict[str, Any] = {"trials": trials}
    keys = ("runs_per_s", "runs_per_s_from_go", "enqueue_per_s", "commits_per_run")
    for key in (*keys, "worker_cpu_us_per_run", "server_cpu_us_per_run", "pooler_cpu_us_per_run"):
        vals = [t[key] for t in trials if t.get(key) is not None]
        if vals:
            out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    return out


def run_pg_steps(task: str, plan: Plan, db: str) -> dict[str, Any]:
    schema = f"s_{secrets.token_hex(4)}"
    params = {
        "url": pg_url(db),
        "db": db,
        "schema": schema,
        "steps": plan.latency_steps,
        "rounds": plan.latency_rounds,
        "count_steps": list(plan.count_steps),
        "count_runs": list(plan.count_runs),
        "run_steps": plan.steps,
    }
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / "pg_steps.py"), task, json.dumps(params)],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=plan.timeout * 2,
    )
    print(f"  {task} on PostgreSQL {time.perf_counter() - t:6.1f}s", file=sys.stderr, flush=True)
    r = parse_result(proc.stdout) or {"error": f"exited {proc.returncode}: {proc.stderr[-500:]}"}
    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    if task == "latency" and "error" not in r:
        r["median"] = {k: statistics.median(v) for k, v in r["us_per_step"].items()}
    return r


# -- reporting -------------------------------------------------------------------


def med(node: Any, key: str) -> float | None:
    if not isinstance(node, dict) or key not in node:
        return None
    return float(node[key]["median"])


def rates(results: dict[str, Any], backend: str, w: int, key: str) -> dict[str, float | None]:
    cell = results["throughput"].get(backend, {}).get(str(w), {})
    return {s: med(cell.get(s), key) for s in SYSTEMS}


def throughput_table(results: dict[str, Any], plan: Plan) -> list[str]:
    """Medians of runs/s and the ratios."""
    rows = [["", "workers", "floor", "tether", "DBOS", "tether/floor", "tether/DBOS"]]
    for backend in plan.backends:
        for w in plan.workers:
            rate = rates(results, backend, w, "runs_per_s")
            rows.append(
                [
                    LABEL[backend],
                    str(w),
                    *(fmt(rate[s]) for s in SYSTEMS),
                    fmt_x(ratio(rate["tether"], rate["floor"])),
                    fmt_x(ratio(rate["tether"], rate["dbos"])),
                ]
            )
    return align(rows)


def per_run_table(results: dict[str, Any], plan: Plan) -> list[str]:
    """How each system scales with workers, and what a run costs it (commits, CPU)."""
    rows = [["", "workers", "scaling f | t | D", "commits/run f | t | D", "CPU ms/run f | t | D"]]
    for backend in plan.backends:
        base = rates(results, backend, plan.workers[0], "runs_per_s")
        for w in plan.workers:
            rate = rates(results, backend, w, "runs_per_s")
            commits = rates(results, backend, w, "commits_per_run")
            cpu = rates(results, backend, w, "worker_cpu_us_per_run")
            rows.append(
                [
                    LABEL[backend],
                    str(w),
                    " | ".join(fmt_x(ratio(rate[s], base[s])) for s in SYSTEMS),
                    " | ".join("—" if commits[s] is None else f"{commits[s]:.1f}" for s in SYSTEMS),
                    " | ".join("—" if cpu[s] is None else f"{cpu[s] / 1000:.2f}" for s in SYSTEMS),
                ]
            )
    return align(rows)


def align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
        for r in rows
    ]


def fmt(v: float | None) -> str:
    return "—" if v is None else (f"{v:,.0f}" if v >= 10 else f"{v:.1f}")


def fmt_x(v: float | None) -> str:
    return "—" if v is None else (f"{v:.2f}×" if v < 10 else f"{v:.1f}×")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def latency_lines(results: dict[str, Any]) -> list[str]:
    lat = results.get("latency")
    if lat is None:
        return ["  (not measured: needs PostgreSQL and tether)"]
    if "error" in lat:
        return [f"  FAILED: {lat['error'].strip().splitlines()[-1]}"]
    m = lat["median"]
    rows = [
        ["", "µs/step", "÷ floor"],
        ["floor: INSERT 1 KB + COMMIT (psycopg, autocommit)", f"{m['floor']:.0f}", "1.00×"],
        [
            f"tether app.run, one run of {lat['steps']} steps",
            f"{m['tether']:.0f}",
            fmt_x(m["tether"] / m["floor"]),
        ],
        [
            "  (info) PostgresStore.append of one 1 KB event",
            f"{m['append']:.0f}",
            fmt_x(m["append"] / m["floor"]),
        ],
    ]
    return align(rows)


def count_lines(results: dict[str, Any]) -> list[str]:
    c = results.get("counts")
    if c is None:
        return ["  (not measured: needs PostgreSQL and tether)"]
    if "error" in c:
        return [f"  FAILED: {c['error'].strip().splitlines()[-1]}"]
    rows = [["", "round trips", "statements", "transactions", "xact_commit"]]
    for key, label in (
        ("floor_per_insert", "floor, per INSERT"),
        ("tether_per_step", "tether app.run, per step"),
        ("enqueue_per_run", "tether app.start (enqueue), per run"),
        ("worker_per_run", f"tether worker, per run of {c['run_steps']} steps"),
    ):
        v = c[key]
        rows.append(
            [label]
            + [f"{v[k]:.2f}" for k in ("round_trips", "statements", "transactions", "commits")]
        )
    return align(rows)


def pooled_lines(results: dict[str, Any], plan: Plan) -> list[str]:
    if "pgbouncer" not in plan.backends or "postgres" not in plan.backends:
        return []
    each = ", ".join(f"{w} worker(s) {fmt_x(pooled_ratio(results, w))}" for w in plan.workers)
    lines = [f"tether through PgBouncer (transaction mode) ÷ direct: {each}"]
    for w in plan.workers:  # where a run's CPU goes, directly and through the pooler
        parts = []
        for backend in ("postgres", "pgbouncer"):
            cell = results["throughput"].get(backend, {}).get(str(w), {}).get("tether")
            cpu = {k: med(cell, k) for k in _CPU}
            if None in (cpu["worker_cpu_us_per_run"], cpu["server_cpu_us_per_run"]):
                continue
            said = " + ".join(f"{name} {(cpu[k] or 0) / 1000:.2f}" for k, name in _CPU.items())
            parts.append(f"{LABEL[backend]} {said} ms")
        if parts:
            lines.append(f"  CPU per run, {w} worker(s): " + "; ".join(parts))
    return lines


_CPU = {
    "worker_cpu_us_per_run": "workers",
    "server_cpu_us_per_run": "server",
    "pooler_cpu_us_per_run": "pooler",
}


def pooled_ratio(results: dict[str, Any], w: int) -> float | None:
    """tether's runs/s through PgBouncer ÷ directly, ``w`` workers, from the same run."""
    return ratio(
        rates(results, "pgbouncer", w, "runs_per_s")["tether"],
        rates(results, "postgres", w, "runs_per_s")["tether"],
    )


def targets(results: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    out = []
    for backend in plan.backends:
        for w in plan.workers if backend != "pgbouncer" else ():
            cell = results["throughput"].get(backend, {}).get(str(w), {})
            r = ratio(med(cell.get("tether"), "runs_per_s"), med(cell.get("dbos"), "runs_per_s"))
            least = TARGETS["runs_vs_dbos"]
            out.append(
                {
                    "what": f"{LABEL[backend]}, {w} worker(s): tether runs/s ≥ {least:.0f}× DBOS's",
                    "value": r,
                    "met": None if r is None else r >= least,
                }
            )
    for w in plan.workers if "pgbouncer" in plan.backends else ():
        r = pooled_ratio(results, w)
        least = TARGETS["pooled_vs_direct"]
        out.append(
            {
                "what": f"PgBouncer, {w} worker(s): tether runs/s ≥ {least}× direct",
                "value": r,
                "met": None if r is None else r >= least,
            }
        )
    lat = results.get("latency", {}).get("median")
    r = lat["tether"] / lat["floor"] if lat else None
    most = TARGETS["step_vs_floor"]
    out.append(
        {
            "what": f"PostgreSQL: tether µs/step ≤ {most}× the INSERT + COMMIT floor",
            "value": r,
            "met": None if r is None else r <= most,
        }
    )
    return out


def report(results: dict[str, Any], plan: Plan) -> str:
    meta = results["meta"]
    v = meta["versions"]
    out = [
        f"tether bench/queues.py — {meta['mode']} mode, {meta['cpus']} CPUs, Python {v['python']}, "
        f"PostgreSQL {meta['postgres']['server_version']} (synchronous_commit="
        f"{meta['postgres']['synchronous_commit']}), SQLite {v['sqlite']}; tether {v['tether']} "
        f"({meta['git']['commit']}{', src dirty' if meta['git']['src_dirty'] else ''}), "
        f"DBOS {v['dbos']}",
        f"{plan.runs} runs of {plan.steps} steps enqueued first, then 1/2/4 worker processes × "
        f"{plan.concurrency} runs at a time, "
        f"{'each process pinned to one CPU (tether: --cpu auto)' if plan.pin else 'not pinned'}; "
        f"DBOS polls every {plan.dbos_poll} s; medians of "
        f"{plan.rounds} interleaved round(s); step result {meta['payload_bytes']} B of JSON",
        "",
        "runs per second (first claim → last completion, from the database):",
        *throughput_table(results, plan),
        "",
        "floor: each run's 7 rows committed one by one by the same processes and threads, no queue",
        *pooled_lines(results, plan),
        "",
        "per run (f: floor, t: tether, D: DBOS):",
        *per_run_table(results, plan),
        "",
        "scaling: runs/s against the same system with one worker process; commits/run: the",
        "database's xact_commit while the workers ran ÷ runs; CPU: the worker processes' CPU",
        "time (all threads) from the start signal to their end ÷ runs",
        "",
        f"a step on PostgreSQL (medians of {plan.latency_rounds} rounds):",
        *latency_lines(results),
        "",
        "what a step, an enqueue and a queued run send and commit on PostgreSQL "
        "(libpq traces; xact_commit includes autovacuum):",
        *count_lines(results),
        "",
        "targets:",
        *(f"  {VERDICT[t['met']]} {t['what']}: {fmt_x(t['value'])}" for t in results["targets"]),
    ]
    return "\n".join(out)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in ("tether", "dbos", "psycopg", "psycopg-pool", "sqlalchemy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI mode: one round, < 90 s")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="tether,dbos or one of them")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="postgres,pgbouncer,sqlite or some"
    )
    parser.add_argument("--runs", type=int, help="runs enqueued per trial")
    parser.add_argument("--rounds", type=int, help="repeats of the whole schedule")
    parser.add_argument("--dbos-poll", type=float, help="DBOS queue polling interval, seconds")
    parser.add_argument(
        "--throughput-only", action="store_true", help="skip the step latency and the counts"
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="leave worker processes free to use every CPU"
    )
    parser.add_argument(
        "--pgbouncer-prepared",
        type=int,
        default=0,
        metavar="N",
        help="start PgBouncer with max_prepared_statements=N (1.21+: TETHER_PGBOUNCER_BIN "
        "names a build) and let tether prepare through it (prepare=on)",
    )
    parser.add_argument("--out", default=str(HERE / "results" / "queue.json"))
    args = parser.parse_args(argv)
    if args.pgbouncer_prepared:
        PGBOUNCER["prepared"] = str(args.pgbouncer_prepared)
        os.environ["TETHER_PGBOUNCER_PREPARED"] = str(args.pgbouncer_prepared)
    plan = QUICK if args.quick else FULL
    changes: dict[str, Any] = {
        "systems": tuple(args.only.split(",")),
        "backends": tuple(args.backends.split(",")),
    }
    for name in ("runs", "rounds", "dbos_poll"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.no_pin:
        changes["pin"] = False
    plan = Plan(**{**asdict(plan), **changes})
    if "dbos" in plan.systems and not _installed("dbos"):
        print("note: DBOS is not installed here; measuring tether alone", file=sys.stderr)
        plan = Plan(**{**asdict(plan), "systems": ("tether",)})

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.parent / f"queue-tmp-{os.getpid()}"  # the repository's disk, not tmpfs
    tmp.mkdir(exist_ok=True)
    started = time.perf_counter()
    git = git_state()  # before: other engineers may commit while this runs
    results: dict[str, Any] = {}
    try:
        with bench_database() as db, pgbouncer() if "pgbouncer" in plan.backends else nullcontext():
            results["throughput"] = run_throughput(plan, db, str(tmp))
            if (
                "postgres" in plan.backends
                and "tether" in plan.systems
                and not args.throughput_only
            ):
                results["latency"] = run_pg_steps("latency", plan, db)
                results["counts"] = run_pg_steps("counts", plan, db)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["targets"] = targets(results, plan)
    results["meta"] = {
        "mode": "quick" if args.quick else "full",
        "plan": asdict(plan),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "seconds": time.perf_counter() - started,
        "payload_bytes": PAYLOAD_BYTES,
        "versions": versions(),
        "postgres": pg_settings(),
        "git": git,
    }
    out_path.write_text(json.dumps(results, indent=2))
    print(report(results, plan))
    print(f"\n({results['meta']['seconds']:.0f} s; results in {out_path})")
    return 0


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
