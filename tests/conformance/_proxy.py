"""A TCP proxy on 127.0.0.1 in front of PostgreSQL, which a test cuts and restores: an
outage of the database as its clients see it, without touching the shared server.

Cut, it resets every connection it carries and refuses new ones the way a restarting
server does: it accepts and closes them at once, counting each (``attempts``: when each
client tried to connect, for the reconnect schedule). Restored, it forwards again.

It runs in a process of its own (:class:`ProxyProcess`): libpq's blocking connect holds
the GIL of the process that calls it, so a proxy thread beside it would never answer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import sys
import threading
import time


class ProxyProcess:
    """:class:`Proxy` in a child process, driven over its stdin and stdout."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._child = subprocess.Popen(
            [sys.executable, __file__, target[0], str(target[1])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self._ask(""))

    def _ask(self, command: str) -> str:
        assert self._child.stdin is not None and self._child.stdout is not None
        if command:
            self._child.stdin.write(command + "\n")
            self._child.stdin.flush()
        return self._child.stdout.readline().strip()

    def cut(self) -> None:
        self._ask("cut")

    def restore(self) -> None:
        self._ask("restore")

    @property
    def attempts(self) -> list[float]:
        """Wall-clock times (time.time()) of the connections refused while cut."""
        return list(json.loads(self._ask("attempts")))

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._ask("close")
        self._child.wait(10)


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.attempts: list[float] = []  # when connections were refused (time.time())
        self._closed = False
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def cut(self) -> None:
        """From now on no client reaches the server; those connected lose their connection."""
        self._cut.set()
        with self._lock:
            conns, self._open = self._open, []
        for s in conns:
            _reset(s)

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                self.attempts.append(time.time())
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                if self._cut.is_set():  # cut while it connected: it does not get through
                    _reset(client)
                    _reset(server)
                    continue
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    _reset(src)
    _reset(dst)


def _reset(s: socket.socket) -> None:
    """End a connection as a dying server's end. shutdown() first: a close() alone leaves
    the connection open while another thread is blocked in recv() on it (the kernel holds
    the socket for that call), and its client would wait for an answer forever."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


def _serve() -> None:
    """The child process: a proxy to argv's host and port; its port, then one line for
    each command read (cut, restore, attempts, close)."""
    proxy = Proxy((sys.argv[1], int(sys.argv[2])))
    print(proxy.port, flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "cut":
            proxy.cut()
        elif command == "restore":
            proxy.restore()
        elif command == "close":
            proxy.close()
            print("ok", flush=True)
            return
        print(json.dumps(proxy.attempts) if command == "attempts" else "ok", flush=True)


if __name__ == "__main__":
    _serve()
