"""Lease owner names, and when a process named by one is known to be gone.

A pid means a process only within one boot of one machine and one pid namespace:
containers on host networking share the host's name but not its pids, and two
machines may share a name. Declaring a live process dead hands its runs to another
worker while it still executes them, so every doubt must answer "not known dead".
"""

from __future__ import annotations

import os
import subprocess
import sys

from tether.model.clock import owner_is_dead_local, pid_space, process_owner


def _dead_pid() -> int:
    """The pid of a child that has exited and been reaped: no process has it now."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_owner_names_its_host_pid_and_pid_space() -> None:
    host, pid, space, nonce = process_owner().split(":")
    assert (host, int(pid), space) == (os.uname().nodename, os.getpid(), pid_space())
    assert len(space) == 8 and len(nonce) == 6  # Linux: the space is always known here
    assert process_owner() != process_owner()  # two Apps of one process: two owners


def test_a_gone_process_of_this_pid_space_is_dead_a_live_one_is_not() -> None:
    here = f"{os.uname().nodename}:{_dead_pid()}:{pid_space()}:abc123"
    assert owner_is_dead_local(here)
    assert owner_is_dead_local("worker:" + here)  # a worker's id names its process too
    parent = f"{os.uname().nodename}:{os.getppid()}:{pid_space()}:abc123"
    assert not owner_is_dead_local(parent)
    assert not owner_is_dead_local(process_owner())  # this very process


def test_another_pid_space_or_host_is_never_declared_dead() -> None:
    pid, host = _dead_pid(), os.uname().nodename
    other = "0badf00d" if pid_space() != "0badf00d" else "0badf00e"
    # a container sharing this host's name (host networking): its pids are its own
    assert not owner_is_dead_local(f"{host}:{pid}:{other}:abc123")
    assert not owner_is_dead_local(f"{host}:{pid}:-:abc123")  # its space was unknown
    assert not owner_is_dead_local(f"{host}x:{pid}:{pid_space()}:abc123")  # another host
    # names of another form: before pid spaces (host:pid:nonce), a worker_id of one's
    # own, garbage
    for name in (f"{host}:{pid}:abc123", "w-busy", "a:b:c:d", "", ":::"):
        assert not owner_is_dead_local(name), name
