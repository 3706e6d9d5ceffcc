"""What every system in the benchmark shares: the step body, its payload, the probe.

Every system (the stdlib floor, tether, LangGraph, DBOS) runs the *same* step
body, :func:`body`, which calls the probe and returns :func:`payload`: a ~1 KB
dict shaped like a model or tool result. The probe is how W3 kills a process
inside a given step and how the recovering process notices when it is back at
work; in W1 and W2 it does nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# The PostgreSQL server the PostgreSQL benchmarks use (its ``test`` database: each script
# makes its own database or schema there).
PG_ADMIN_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

# One realistic step result: an LLM-ish message with text, usage and a tool call.
_TEXT = (
    "The p99 latency of the checkout service rose from 180 ms to 870 ms after the "
    "14:02 deploy. Traces show the time is spent in the inventory client, which now "
    "retries three times on a 250 ms timeout. Rolling back the client library or "
    "raising the timeout should restore the previous latency; the error budget "
    "for the week is 38% spent. "
)
_BASE: dict[str, Any] = {
    "id": "msg_0000",
    "model": "bench-model-1",
    "role": "assistant",
    "content": _TEXT * 2,
    "usage": {"input_tokens": 812, "output_tokens": 133},
    "tool_calls": [{"name": "search_logs", "args": {"service": "checkout", "limit": 50}}],
    "scores": [0.91, 0.42, 0.13, 0.07],
    "citations": ["trace:7f3a9c", "deploy:14:02", "runbook:checkout-latency"],
    "step": 0,
}


def payload(k: int) -> dict[str, Any]:
    """The result of step ``k``: a fresh ~1 KB dict (its JSON is about 1,000 bytes)."""
    out = dict(_BASE)
    out["id"] = f"msg_{k:04d}"
    out["step"] = k
    return out


PAYLOAD_BYTES = len(json.dumps(payload(1000)).encode())


class Probe:
    """Called at the top of every step body.

    ``mode`` is ``"off"`` (W1, W2), ``"crash"`` (SIGKILL this process on
    entering step ``kill_at``) or ``"record"`` (count executed bodies and note
    the monotonic time of the first one: the recovering process of W3).
    """

    def __init__(self) -> None:
        self.mode = "off"
        self.kill_at = 0
        self.first_at: float | None = None
        self.first_step: int | None = None
        self.executed = 0
        self.re_executed = 0  # bodies run again at or before kill_at (already begun once)

    def enter(self, k: int) -> None:
        if self.mode == "off":
            return
        if self.mode == "crash":
            if k == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return
        if self.first_at is None:
            self.first_at = time.monotonic()
            self.first_step = k
        self.executed += 1
        if k <= self.kill_at:
            self.re_executed += 1


PROBE = Probe()


def body(k: int) -> dict[str, Any]:
    """The step body every system runs: the probe, then the ~1 KB result."""
    PROBE.enter(k)
    return payload(k)


def expected_total(steps: int) -> int:
    """What a run of ``steps`` steps returns: the sum of its steps' ``step`` fields."""
    return steps * (steps + 1) // 2


class Session(Protocol):
    """One system opened on one database file, ready to run the benchmark agent."""

    def run(self, steps: int) -> int:
        """One durable run of ``steps`` steps, start to completion; returns its total."""
        ...

    def start_w3(self, steps: int) -> int:
        """The W3 run (a known key), started from scratch; the probe kills it midway."""
        ...

    def recover_w3(self) -> int:
        """Resume the interrupted W3 run to completion, as a fresh process would."""
        ...

    def settings(self) -> dict[str, Any]:
        """The SQLite settings in force (journal mode, synchronous) and other notes."""
        ...

    def close(self) -> None: ...


@dataclass
class PragmaLog:
    """The journal mode and synchronous level a system's connections actually use."""

    seen: dict[str, Any] = field(default_factory=dict)

    def record(self, conn: Any) -> None:
        self.seen["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        self.seen["synchronous"] = SYNC_NAMES.get(level, str(level))


SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def remove_db(path: str) -> None:
    """Delete a SQLite file and its companions (-wal, -shm, -journal, tether's -lock)."""
    for suffix in ("", "-wal", "-shm", "-journal", "-lock"):
        with suppress(FileNotFoundError):
            os.remove(path + suffix)


def db_bytes(path: str) -> int:
    """Bytes on disk of a SQLite database once its WAL is checkpointed into the file."""
    if os.path.exists(path + "-wal"):
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(_sizes(path))


def _sizes(path: str) -> Iterator[int]:
    for suffix in ("", "-wal", "-journal"):
        if os.path.exists(path + suffix):
            yield os.path.getsize(path + suffix)


def git_state() -> dict[str, Any]:
    """The repository's commit, whether src/ has uncommitted changes, and where the
    benchmark imported tether from (results name the code they measured)."""
    repo = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=False
        ).stdout.strip()

    spec = importlib.util.find_spec("tether")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "src_dirty": bool(git("status", "--porcelain", "--", "src")),
        "tether_imported_from": str(Path(spec.origin).parent) if spec and spec.origin else None,
    }
