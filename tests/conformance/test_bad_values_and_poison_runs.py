"""A value that cannot be stored fails its step, and only its run; a run that fails the
same way on every claim (a "poison run") is failed after a bounded number of attempts.

The value of the issue: a step's result holding a lone surrogate (``json.loads('"\\ud800"')``,
a model's truncated emoji escape). On SQLite it wedged the process's writer (every later
write failed, the other runs and the heartbeat with it, and ``tether worker`` exited, to
crash again on the same run); on PostgreSQL the run was given back to its queue and
claimed again every lease ttl, forever, its steps executed (paid) again each time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _conformance import Backend, until

import tether
from tether.services.worker import ATTEMPT_FAILED, Worker

pytestmark = pytest.mark.conformance

LONE = json.loads('"\\ud800"')  # what a model's "\ud83d\ude00" cut in two decodes to


@contextmanager
def _working(app: tether.App, **options: Any) -> Iterator[Worker]:
    """A worker of queue "q" in a thread, stopped (and checked alive) at the end."""
    worker = app.worker(queues=["q"], poll=0.05, **options)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        yield worker
        assert t.is_alive(), "the worker must not exit on its own"
    finally:
        worker.stop()
        t.join(30)
    assert not t.is_alive()


def test_a_step_returning_text_that_is_not_unicode_fails_that_run_alone(
    backend: Backend,
) -> None:
    app = tether.open(backend.url, lease_ttl=2)
    calls: list[str] = []

    def model() -> dict[str, Any]:
        calls.append("model")
        return {"text": ["Sure! ", LONE]}

    @app.agent
    def chat(run: tether.Run) -> Any:
        run.step("prompt", lambda: "hi")
        return run.step("model", model)

    @app.agent
    def other(run: tether.Run, i: int) -> int:
        return sum(int(run.step(f"s{k}", lambda k=k: k + i)) for k in range(3))

    try:
        bad = app.start(chat, queue="q")
        good = [app.start(other, i, queue="q") for i in range(6)]
        with _working(app, concurrency=4) as worker:
            assert until(lambda: app.get(bad).status == "failed", 20), app.get(bad).status
            assert until(lambda: all(app.get(r).status == "completed" for r in good), 20)
        failure = app.get(bad).failure or {}
        assert failure["type"] == "tether.errors.EncodeError"
        assert failure["step"] == "model" and failure["position"] == 2
        assert f"run {bad}" in failure["message"] and "$.text[1]" in failure["message"]
        assert "lone surrogate" in failure["message"]
        assert calls == ["model"]  # failed once: never claimed and executed again
        assert worker.stats.failed == 1 and worker.stats.errors == []
        assert [app.get(r).output for r in good] == [3 * i + 3 for i in range(6)]
    finally:
        app.close()


def test_an_error_whose_message_is_not_unicode_fails_the_run_with_its_escape(
    app: tether.App,
) -> None:
    @app.agent
    def fails(run: tether.Run) -> None:
        def call() -> None:
            raise RuntimeError(f"the model said {LONE!s}")

        run.step("call", call, retry=tether.Retry(max_attempts=1))

    with pytest.raises(tether.RunFailed) as failed:
        app.run(fails)
    failure = app.get(failed.value.run_id).failure or {}
    assert failure["type"] == "RuntimeError" and failure["step"] == "call"
    assert failure["message"] == "the model said \\ud800"


def test_a_poison_run_is_failed_after_its_attempts_and_the_worker_goes_on(
    backend: Backend,
) -> None:
    """A run whose log cannot be read (another program wrote a row that does not parse)
    fails in the executor on every claim: each worker that claims it gives it back. After
    ``poison_after`` such attempts in a row, the log at the same seq, it is failed, with
    why in its log; the other runs are not held up and the worker stays up."""
    app = tether.open(backend.url, lease_ttl=1)
    executed: list[int] = []

    @app.agent
    def work(run: tether.Run, i: int) -> int:
        executed.append(i)
        return int(run.step("s", lambda: i))

    try:
        poison = app.start(work, 0, queue="q")
        where = f"type = 'run.created' AND {_of(backend, poison)}"
        backend.sql(f"UPDATE events SET data = '{{bad' WHERE {where}")
        good = app.start(work, 1, queue="q")
        with _working(app, poison_after=2) as worker:
            assert until(lambda: app.store.get_run(poison).status == "failed", 30)
            assert until(lambda: app.get(good).status == "completed", 10)
        assert executed == [1]  # the poison run never reached its agent
        attempts = [a for a in app.store.read_audit(poison) if a.action == ATTEMPT_FAILED]
        assert [json.loads(a.detail)["attempt"] for a in attempts] == [1, 2]
        assert all("CorruptRecord" in json.loads(a.detail)["error"] for a in attempts)
        last = app.store.read_events(poison)[-1]
        assert last.type == "run.failed"
        failure = last.payload()["error"]
        assert failure["poison"] == {"attempts": 2, "seq": 1}
        assert "2 executions in a row" in failure["message"]
        assert f"tether retry {poison}" in failure["message"]
        assert "event 1 (run.created)" in failure["message"]
        assert worker.stats.failed == 1
    finally:
        app.close()


class Unprintable(Exception):
    """An exception whose message cannot be read: recording it fails outside the steps."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")


def test_a_run_that_moves_between_failed_attempts_is_not_poison(backend: Backend) -> None:
    """Attempts count only while the log stays at the same seq: a run whose log grows
    between them (it makes progress) is not failed, however many attempts it takes. Each
    attempt here records one more step, then raises an exception whose str() raises, which
    escapes the executor while it records the failure."""
    app = tether.open(backend.url, lease_ttl=1)
    seen: list[int] = []

    @app.agent
    def work(run: tether.Run) -> int:
        for k in range(3):
            run.step(f"s{k}", lambda k=k: k)
            if len(seen) == k:
                seen.append(k)
                raise Unprintable
        return 3

    try:
        rid = app.start(work, queue="q")
        with _working(app, poison_after=2) as worker:
            assert until(lambda: app.get(rid).status == "completed", 30), app.get(rid)
        assert seen == [0, 1, 2] and app.get(rid).output == 3
        attempts = [a for a in app.store.read_audit(rid) if a.action == ATTEMPT_FAILED]
        assert [json.loads(a.detail)["attempt"] for a in attempts] == [1, 1, 1]
        assert len(worker.stats.errors) == 3 and worker.stats.failed == 0
    finally:
        app.close()


def _of(backend: Backend, run_id: str) -> str:
    """A condition selecting the events of one run (SQLite keys them by a run number)."""
    if backend.name == "sqlite":
        return f"(key >> 32) = (SELECT rk FROM runs WHERE id = '{run_id}')"
    return f"run_id = '{run_id}'"
