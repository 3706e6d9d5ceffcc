"""``tether demo``: an incident-investigation agent that is killed mid-run and resumes.

The agent, :func:`investigate`, asks a scripted model for a plan, queries metrics,
searches logs (a flaky tool: its first attempt fails and a retry succeeds), checks
deployments, asks the model for a diagnosis, decides on a remediation, keeps it in a
task variable, asks a human to approve the one irreversible step (rolling back the
deploy), rolls it back and asks the model for a summary: 10 positions. Nothing here needs a
network, an API key or a server: the "model" returns canned answers with token usage
and cost, like a real one.

The demo starts the agent in a child process that sends itself SIGKILL inside
``check_deployments`` (positions 1–3 are committed by then), then resumes the run in
this process with ``app.resume``: positions 1–3 come back from the journal and 4–7 run,
then the run waits for the approval without holding a process. The demo approves it
from another process (``tether approve``) and resumes it: the rollback runs once.

Run it with ``tether demo`` or ``python -m tether.demo [--db PATH]``. The agent lives
at module level so that any process allowed to import this module can resume its runs
by the module the run recorded (``tether --db tether-demo.db --code tether.demo resume
RUN``). Set ``TETHER_DEMO_TRACE`` to a
file path to have every executed tool and model call append ``PID NAME`` there (the
tests use it to prove that no committed step runs twice).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tether
from tether.model.status import RunStatus, StepStatus
from tether.store.urls import is_postgres, sqlite_path

AGENT = "investigate"
AGENT_MODULE = "tether.demo"  # its module, whatever name this file runs under
DEFAULT_DB = "tether-demo.db"
CRASH_STEP = "check_deployments"
INCIDENT = "INC-1042: checkout-api p99 latency above 2 s since 14:02"
STEP_SECONDS = 0.35
TRACE_ENV = "TETHER_DEMO_TRACE"
#: The flaky tool's policy: three attempts, 0.2 s apart (±10 % jitter).
FLAKY_RETRY = tether.Retry(max_attempts=3, backoff=0.2)


@dataclass(slots=True)
class _Flags:
    """Per-process switches: narration on, and the step in which to crash (child only)."""

    narrate: bool = False
    crash_in: str | None = None
    log_searches: int = 0


_flags = _Flags()


# -- the scripted model --------------------------------------------------------

_ANSWERS: dict[str, tuple[str, dict[str, Any]]] = {
    "plan": (
        "Check checkout-api's metrics, its error logs and recent deploys from 13:45.",
        {"service": "checkout-api", "window": "13:45-14:30"},
    ),
    "diagnose": (
        "Deploy #4812 cut the DB pool from 50 to 5; checkout requests queue for a "
        "connection. Roll it back.",
        {
            "cause": "deploy #4812 cut the DB connection pool from 50 to 5",
            "action": "rollback deploy #4812",
            "confidence": 0.86,
        },
    ),
    "summarise": (
        "checkout-api p99 rose from 180 ms to 2.4 s at 14:02, a minute after deploy #4812 "
        "cut its DB pool from 50 to 5 (1,283 'pool exhausted' errors). Roll back #4812.",
        {},
    ),
}


def scripted_model(purpose: str, prompt: str) -> dict[str, Any]:
    """A stand-in for a model API: a canned answer per purpose, with usage and cost."""
    _trace(f"model:{purpose}")
    _pause()
    text, data = _ANSWERS[purpose]
    tokens_in, tokens_out = 180 + len(prompt) // 4, 12 + len(text) // 4
    cost = round(tokens_in * 3e-6 + tokens_out * 15e-6, 6)
    _say(f"ran    {purpose:<18} model: {tokens_in} tokens in, {tokens_out} out")
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost": cost}
    return {"text": text, "data": data, "usage": usage}


# -- the tools -----------------------------------------------------------------


def query_metrics(service: str, window: str) -> dict[str, Any]:
    """Latency and error rate of ``service`` over ``window`` (canned)."""
    _tool_call("query_metrics")
    _say("ran    query_metrics      p99 2400 ms (baseline 180 ms) since 14:02")
    return {
        "service": service,
        "window": window,
        "p99_ms": 2400,
        "baseline_p99_ms": 180,
        "error_rate": 0.031,
        "since": "14:02",
    }


def search_logs(service: str, window: str) -> dict[str, Any]:
    """Error log lines of ``service``: a flaky tool whose first call times out."""
    _tool_call("search_logs")
    _flags.log_searches += 1
    if _flags.log_searches == 1:
        _say("failed search_logs        ConnectionError: log index timed out (tether retries)")
        raise ConnectionError(f"log index timed out searching {service} logs ({window})")
    _say("ran    search_logs        1,283 'pool exhausted' errors (attempt 2)")
    return {
        "service": service,
        "top_error": "pool exhausted: waited 2000 ms for a connection",
        "count": 1283,
    }


def check_deployments(service: str, window: str) -> list[dict[str, Any]]:
    """Deploys of ``service`` within ``window`` (canned)."""
    _tool_call("check_deployments")
    _say("ran    check_deployments  deploy #4812 at 14:01: db.pool_size 50 -> 5")
    return [
        {
            "id": 4812,
            "service": service,
            "at": "14:01",
            "by": "ci",
            "change": "db.pool_size 50 -> 5",
        }
    ]


@tether.tool(risk="irreversible")
def rollback_deploy(deploy_id: int, *, idempotency_key: str) -> dict[str, Any]:
    """Roll a deploy back: the one irreversible step, so a human approves it first."""
    _tool_call("rollback_deploy")
    _say(f"ran    rollback_deploy    deploy #{deploy_id} rolled back (key …{idempotency_key[-8:]})")
    return {"rolled_back": deploy_id, "idempotency_key": idempotency_key}


def _tool_call(name: str) -> None:
    _trace(name)
    if _flags.crash_in == name:
        _crash(name)
    _pause()


def _crash(name: str) -> None:
    """Die the way a machine dies: SIGKILL, no cleanup, no except/finally runs."""
    _say(f"...    {name:<18} the process sends itself SIGKILL, mid-step")
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


def _pause() -> None:
    time.sleep(STEP_SECONDS)


def _trace(name: str) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {name}\n")


def _say(text: str) -> None:
    if _flags.narrate:
        print(f"   {text}", flush=True)


# -- the agent -----------------------------------------------------------------


@tether.agent
def investigate(run: tether.Run, incident: str) -> dict[str, Any]:
    """Investigate an incident: plan, gather evidence, diagnose, decide, summarise."""
    plan = run.llm("plan", scripted_model, "plan", incident)["data"]
    service, window = plan["service"], plan["window"]
    evidence = {
        "metrics": run.step("query_metrics", query_metrics, service, window),
        "logs": run.step("search_logs", search_logs, service, window, retry=FLAKY_RETRY),
        "deploys": run.step("check_deployments", check_deployments, service, window),
    }
    diagnosis = run.llm("diagnose", scripted_model, "diagnose", json.dumps(evidence))["data"]
    action = run.decide(
        "remediation",
        diagnosis["action"],
        why=diagnosis["cause"],
        confidence=diagnosis["confidence"],
    )
    run.vars["remediation"] = action
    deploy = evidence["deploys"][0]["id"]
    run.approve("rollback", payload={"action": action, "deploy": deploy}, approvers=["oncall"])
    run.tool(rollback_deploy, deploy)
    summary = run.llm("summarise", scripted_model, "summarise", f"{incident}\n{diagnosis}")
    return {
        "incident": incident,
        "cause": diagnosis["cause"],
        "action": action,
        "summary": summary["text"],
    }


# -- the demo (parent process) -----------------------------------------------------


def run_demo(db: str = DEFAULT_DB) -> int:
    """Run the whole demo on ``db`` (overwritten); return the process exit code."""
    _flags.narrate = True
    _out("tether demo: an incident-investigation agent is killed mid-run, then resumes")
    _out(f"database: {db} (fresh; no network, no API key, no server)\n")
    fresh_database(db)
    pid, code = _run_child(db)
    if code != -signal.SIGKILL:
        _out(f"\nthe child process {pid} exited with {code} instead of dying; see above")
        return 1
    with tether.open(db, code=[AGENT_MODULE]) as app:  # resume finds investigate by its run
        run_id = _only_run(app)
        _report_crash(app, run_id, pid)
        first = _resume(app, run_id)
        if first.status != RunStatus.WAITING:
            _out(f"\nthe run is {first.status} instead of waiting for the approval")
            return 1
        _report_waiting(first)
        _approve_elsewhere(db, run_id)
        handle = app.resume(run_id)
        _report_result(app, first, handle, db)
    return 0


def _report_waiting(handle: tether.RunHandle) -> None:
    w = handle.waiting or {}
    who = ", ".join(w.get("approvers") or [])
    _out(
        f"4. It waits for a human: approval {w.get('name')!r} by {who} for "
        f"{w.get('payload', {}).get('action')}; no process is held while it waits"
    )


def _approve_elsewhere(db: str, run_id: str) -> None:
    cmd = ["approve", run_id, "rollback", "--by", "oncall", "--reason", "matches the deploy"]
    _out(f"5. Another process approves: tether --db {db} {' '.join(cmd[:5])}")
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", db, *cmd],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise tether.InvalidState(f"the approval failed: {done.stderr.strip()}")
    _out("   and this process resumes the run again")


def fresh_database(db: str) -> None:
    """Remove ``db`` (and its -wal/-shm/-lock files) if it is absent or holds only demo runs."""
    if is_postgres(db):
        raise tether.InvalidState("the demo overwrites its database: give it a SQLite file")
    path = sqlite_path(db)  # sqlite:///rel.db, sqlite:////abs.db, ~/a.db
    if os.path.exists(path):
        with tether.open(db) as app:  # refuses a file that is not a tether database
            others = {r.agent for r in app.runs(limit=1000)} - {AGENT}
        if others:
            raise tether.InvalidState(
                f"{db} holds runs of other agents ({', '.join(sorted(others))}); the demo "
                f"overwrites its database, so give it its own file (default {DEFAULT_DB})"
            )
    for suffix in ("", "-wal", "-shm", "-journal", "-lock"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def _run_child(db: str) -> tuple[int, int]:
    """Start the agent in a child process that kills itself; wait; return (pid, code)."""
    cmd = [sys.executable, "-m", "tether.demo", "child", db, "--crash-in", CRASH_STEP]
    sys.stdout.flush()
    proc = subprocess.Popen(cmd)
    _out(f"1. Start the agent in a child process (pid {proc.pid}); it dies in {CRASH_STEP}")
    return proc.pid, proc.wait()


def _only_run(app: tether.App) -> str:
    runs = app.runs(agent=AGENT, limit=2)
    if len(runs) != 1:
        raise tether.NotFound(f"expected one {AGENT} run in the demo database, found {len(runs)}")
    return runs[0].id


def _report_crash(app: tether.App, run_id: str, pid: int) -> None:
    state = app.get(run_id)
    _out(f"2. The child process {pid} died: killed by signal 9 (SIGKILL)")
    _out(f"   run {run_id} in the database: {state.status}, {state.describe_position()}")


def _resume(app: tether.App, run_id: str) -> tether.RunHandle:
    done = [(s.position, s.name) for s in app.get(run_id).steps if s.status == StepStatus.COMPLETED]
    _out(f"3. Resume it in this process (pid {os.getpid()}) with app.resume(run_id)")
    _out(f"   committed, so read from the journal: {_positions(done)}")
    return app.resume(run_id)


def _report_result(
    app: tether.App, first: tether.RunHandle, handle: tether.RunHandle, db: str
) -> None:
    state = app.get(handle.id)
    output = handle.output if isinstance(handle.output, dict) else {}
    u = state.usage
    _out(
        f"6. The run {handle.status}: {len(state.steps)} positions committed, "
        f"in {state.executions} executions (the child's and two here)"
    )
    _wrap(f"reused (from the journal, not run again): {_positions(first.reused)}")
    _wrap(f"ran after the crash: {_positions(first.executed)}")
    _wrap(f"ran after the approval: {_positions(handle.executed)}")
    _wrap(f"decision: {output.get('action')} ({output.get('cause')})")
    _wrap(f"summary: {output.get('summary')}")
    _wrap(
        f"usage: {u.calls} model calls, {u.input_tokens} tokens in, {u.output_tokens} out, "
        f"${u.cost:.4f} (each call paid once)"
    )
    _out("\nInspect it:")
    for command in ("show", "log"):
        _out(f"   tether --db {db} {command} {handle.id}")


def _positions(items: Sequence[tuple[int, str]]) -> str:
    return ", ".join(f"{pos} {name}" for pos, name in items) or "nothing"


def _wrap(text: str) -> None:
    _out(textwrap.fill(text, width=100, initial_indent="   ", subsequent_indent="     "))


def _out(text: str) -> None:
    print(text, flush=True)


# -- the child process -------------------------------------------------------------


def child_main(db: str, crash_in: str | None) -> int:
    """Run the agent on ``db`` from the start; with ``crash_in``, die inside that step."""
    _flags.narrate = True
    _flags.crash_in = crash_in
    with tether.open(db) as app:
        handle = app.run(investigate, INCIDENT)
    _out(f"   run {handle.id} {handle.status} without crashing")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tether.demo [--db PATH]``; ``child DB [--crash-in STEP]`` is internal."""
    args = _parser().parse_args(argv)
    db = args.path or args.db
    try:
        if args.what == "child":
            return child_main(db, args.crash_in)
        return run_demo(db)
    except tether.TetherError as e:
        print(f"tether: error: {e}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tether.demo",
        description="An incident-investigation agent is killed mid-run, then resumes.",
    )
    p.add_argument(
        "what",
        nargs="?",
        choices=["demo", "child"],
        default="demo",
        help="'demo' (the default) runs the demo; 'child' is the process it kills",
    )
    p.add_argument("path", nargs="?", default=None, help=argparse.SUPPRESS)
    p.add_argument("--db", default=DEFAULT_DB, help=f"the demo's database (default {DEFAULT_DB})")
    p.add_argument("--crash-in", default=None, help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    # As ``python -m tether.demo`` this file is ``__main__``; run the importable module
    # instead so that runs record their agent as tether.demo.investigate.
    from tether.demo import main as _main

    sys.exit(_main())
