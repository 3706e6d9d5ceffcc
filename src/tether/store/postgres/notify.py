"""LISTEN/NOTIFY of the PostgreSQL backend: workers wait for work on their queues and are
woken by an enqueue's NOTIFY (one listening connection per store, in a thread).

LISTEN needs a session of its own: the listener connects to ``listen_url`` when one is
given (a direct connection, or a session-mode pool, when the store's URL is a
transaction pooler's), else to the store's URL unless that is a transaction pooler's.
Without a listener, waiting workers poll: they wait out their timeout (the worker's
``poll``) and look again. NOTIFY itself works through any pooler."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import suppress

import psycopg
from psycopg import sql

from tether.store.postgres.pool import Conn, PgConnections, _first_line

log = logging.getLogger("tether.postgres")


class PgNotifications(PgConnections):
    """Work notifications: :meth:`notify_work` and :meth:`wait_for_work`."""

    channel: str
    _listener: Conn | None
    _listening: threading.Lock
    _listen_thread: threading.Thread | None
    _waiters: dict[int, tuple[threading.Event, frozenset[str]]]
    _closing: threading.Event
    _wires: Sequence[object]  # PostgresStore's group-commit connections, one per lane

    def notify_work(self, queue: str) -> None:
        with self._borrow() as conn:
            conn.execute(self._Q["notify_work"], (self.channel, queue))

    def wait_for_work(self, queues: Sequence[str], timeout: float, wake: threading.Event) -> None:
        """Wait until ``wake`` is set: by the worker itself (a run ended), by this store's
        listener thread on a NOTIFY naming one of ``queues``, or after ``timeout``."""
        if self._listen_conninfo() is not None:
            self._ensure_listener()
        key = id(wake)
        with self._listening:
            self._waiters[key] = (wake, frozenset(queues))
        try:
            wake.wait(timeout)
        finally:
            with self._listening:
                self._waiters.pop(key, None)

    def _ensure_listener(self) -> None:
        with self._listening:
            if self._listen_thread is None or not self._listen_thread.is_alive():
                self._listen_thread = threading.Thread(
                    target=self._listen_loop, name="tether-pg-listen", daemon=True
                )
                self._listen_thread.start()

    def _listen_loop(self) -> None:
        """One LISTEN connection per store: every NOTIFY wakes the waiters of its queue."""
        while not self._closing.is_set():
            try:
                listener = self._listener or self._listen()
                for note in listener.notifies(timeout=1.0):
                    self._wake_waiters(note.payload)
            except psycopg.Error as e:  # waiters still wake on their timeout: a poll
                if self._closing.is_set():
                    return
                log.warning(
                    "tether: LISTEN on %s failed (%s); polling", self.listen_where, _first_line(e)
                )
                self._drop_listener()
                self._closing.wait(1.0)

    def _wake_waiters(self, queue: str) -> None:
        with self._listening:
            targets = [w for w, queues in self._waiters.values() if queue in queues]
        for wake in targets:
            wake.set()

    @property
    def connection_budget(self) -> dict[str, int]:
        """The most connections this store opens to its URL (and ``listen_url``): the
        pool's ``max_size``, one per group-commit lane, and the listener (none behind a
        pooler without ``listen_url``); ``total`` is their sum (docs/postgres.md)."""
        listener = 0 if self._listen_conninfo() is None else 1
        pool = self._pool.max_size
        lanes = len(self._wires)  # PostgresStore's: one per lane
        return {
            "pool": pool,
            "lanes": lanes,
            "listener": listener,
            "total": pool + lanes + listener,
        }

    def _listen_conninfo(self) -> str | None:
        """Where LISTEN can run: ``listen_url``, else the store's URL if no pooler is in
        the way, else nowhere (waiting workers poll)."""
        if self.listen_conninfo is not None:
            return self.listen_conninfo
        return None if self.pooled else self.conninfo

    def _listen(self) -> Conn:
        conninfo = self._listen_conninfo()
        assert conninfo is not None, "no listener behind a pooler without listen_url"
        conn = psycopg.connect(
            conninfo, autocommit=True, connect_timeout=max(2, round(self.timeout))
        )
        conn.execute(sql.SQL(self._Q["listen"]).format(channel=sql.Identifier(self.channel)))
        self._listener = conn
        return conn

    def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with suppress(psycopg.Error):
                listener.close()
