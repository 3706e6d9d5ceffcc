"""A small disk that tests fill up and free: a real tmpfs when this process may mount one
(root, and TETHER_TEST_NO_MOUNT is not 1), else SQLite's ``PRAGMA max_page_count`` on a
store's connections (which SQLite reports as the same SQLITE_FULL); ``Disk.real`` says
which."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_PAGES = 1073741823  # SQLite's default max_page_count


@dataclass
class Disk:
    path: Path
    real: bool  # a tmpfs of its own; else max_page_count stands for it

    def fill(self, store: Any = None) -> None:
        """Leave no room: a file takes every free block (or the store may grow no more)."""
        if not self.real:
            self._limit(store, "page_count")
            return
        chunk = b"\0" * 65536
        with open(self.path / "filler", "ab") as f:
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
        with contextlib.suppress(OSError), open(self.path / "filler2", "ab") as f:
            f.write(b"\0" * 512)  # the last blocks a smaller write still found

    def free(self, store: Any = None) -> None:
        if not self.real:
            self._limit(store, str(MAX_PAGES))
            return
        for name in ("filler", "filler2"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path / name)

    @staticmethod
    def _limit(store: Any, pages: str) -> None:
        for conn in [*store._all, store._writer()]:
            limit = pages
            if pages == "page_count":  # no page more than it has now
                limit = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {limit}")


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Disk]:
    """A tmpfs of ``size`` mounted at ``where`` (unmounted after), or, where mounting is not
    allowed, the folder itself with max_page_count standing for the full disk."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = (
        os.environ.get("TETHER_TEST_NO_MOUNT") != "1"  # to try the fallback
        and os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield Disk(where, real=mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
