"""Agents and strategies shared by the time-travel tests (fork, gc, export).

``scripted`` runs the program it is given as input: each op takes one position (a
step, a variable write or delete, a decision). A ``flaky`` step fails its first attempt
and is retried; a ``pause`` step interrupts the run once (a crash-like exit), so the
log also holds failed attempts, suspensions and resumes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import tether

RETRY = tether.Retry(max_attempts=3, backoff=0.0, jitter=0.0)
_FAILED_ONCE: set[str] = set()
LAST_RUN: list[str] = []

values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
ops = st.one_of(
    st.tuples(st.sampled_from(["step", "step", "flaky", "pause"]), values),
    st.tuples(st.just("var"), st.sampled_from(["a", "b"]), values),
    st.tuples(st.just("del"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("decide"), st.text(max_size=4)),
)
programs = st.lists(ops, min_size=1, max_size=8)


def work(kind: str, value: Any, key: str) -> Any:
    """A step's work: ``flaky`` fails once, ``pause`` interrupts once (per run and position)."""
    if kind in ("flaky", "pause") and key not in _FAILED_ONCE:
        _FAILED_ONCE.add(key)
        if kind == "pause":
            raise KeyboardInterrupt
        raise RuntimeError(f"flaky {key}")
    return value


def register(app: tether.App) -> Any:
    """Register ``scripted`` on ``app`` and return it."""

    @app.agent
    def scripted(run: tether.Run, program: list[Any]) -> dict[str, int]:
        LAST_RUN.append(run.id)
        for i, op in enumerate(program):
            kind = op[0]
            if kind == "var":
                run.vars[op[1]] = op[2]
            elif kind == "del":
                run.vars.pop(op[1], None)
            elif kind == "decide":
                run.decide(f"d{i}", choice=op[1], why=f"because {i}")
            else:
                run.step(f"s{i}", work, kind, op[1], f"{run.id}:{i}", retry=RETRY)
        return {"n": len(program)}

    return scripted


def execute(app: tether.App, agent: Any, program: list[Any]) -> str:
    """Run ``program`` to completion (resuming after pauses); return the run id."""
    try:
        return app.run(agent, program).id
    except KeyboardInterrupt:
        run_id = LAST_RUN[-1]
    while True:
        try:
            app.resume(run_id)
            return run_id
        except KeyboardInterrupt:
            continue


def finish(app: tether.App, run_id: str) -> tether.RunHandle:
    """Resume ``run_id`` until it ends (pauses interrupt it once per position)."""
    while True:
        try:
            return app.resume(run_id)
        except KeyboardInterrupt:
            continue
