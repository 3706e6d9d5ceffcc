"""A run whose lease a dead process of this machine holds is taken over at once, not after
its lease expires; one a live process holds is not taken. And a worker run's final event
that the store could not commit gives its lease back through the heartbeat's retries."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import tether
from tether.errors import Conflict
from tether.model.clock import pid_space

pytestmark = pytest.mark.conformance


def _owner(pid: int) -> str:
    return f"{os.uname().nodename}:{pid}:{pid_space() or '-'}:abc123"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _held_by(app: tether.App, owner: str) -> str:
    @app.agent
    def job(run: tether.Run, x: int) -> int:
        return int(run.step("double", lambda v: v * 2, x))

    run_id = app.start(job, 21)
    # the lease of a process that claimed it, for an hour
    app.store.claim(run_id, owner=owner, ttl=3600.0, now=time.time())
    return run_id


def test_a_run_held_by_a_dead_local_process_is_taken_over_at_once(app: tether.App) -> None:
    run_id = _held_by(app, _owner(_dead_pid()))
    assert app.resume(run_id).output == 42
    assert app.get(run_id).status == "completed"


def test_a_run_held_by_a_live_process_is_not_taken(app: tether.App) -> None:
    parent = os.getppid()  # alive while this test runs, and not this process
    run_id = _held_by(app, _owner(parent))
    with pytest.raises(Conflict):
        app.resume(run_id)
    record = app.record(run_id)
    assert (record.status, record.lease_owner) == ("queued", _owner(parent))


def test_an_unwritten_end_gives_the_lease_back_on_the_next_retry(app: tether.App) -> None:
    run_id = _held_by(app, app.owner)
    epoch = app.record(run_id).epoch
    assert app.store.unwritten_end is not None  # the app's leases listen to the store
    app.store.unwritten_end(run_id, epoch)
    assert app.record(run_id).lease_owner == app.owner  # nothing written where it was found
    app._leases.retry_let_go()  # what the heartbeat thread does every second
    assert app.record(run_id).lease_owner is None
    assert app.resume(run_id).output == 42  # any process may claim it now
