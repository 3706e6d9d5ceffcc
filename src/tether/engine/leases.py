"""The lease keeper: claims, heartbeats and giving leases back, for one process.

A lease is a due time written with its holder's clock and judged expired by other
processes' clocks, so the clock is checked against the database's once, before the
first lease (:meth:`Leases.check_clock`). While this process executes runs, a heartbeat
thread extends their leases every third of the ttl and carries cancel requests to them
(:func:`heartbeat`); a lease the database refused to give back is tried again every
second (:meth:`Leases.let_go`), since a heartbeat would otherwise extend it for as long
as the process lives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress

from tether.engine.calls import Cancelling
from tether.engine.deps import Deps
from tether.engine.journal import Journal
from tether.errors import ClockSkew, LeaseLost, NotFound, StoreError, TetherError
from tether.model.clock import SystemClock, owner_is_dead_local
from tether.store import Lease, RunRecord, Transition

log = logging.getLogger("tether")
# seconds between looks for cancel requests while runs execute here (a read of the leased
# runs, between heartbeats: those come every third of the lease's ttl and bring them too)
CANCEL_POLL = 1.0


class Active:
    """The executions in this process, by run id (their journals)."""

    def __init__(self) -> None:
        self.journals: dict[str, Journal] = {}
        self._lock = threading.Lock()

    def add(self, journal: Journal) -> None:
        with self._lock:
            self.journals[journal.run_id] = journal

    def remove(self, journal: Journal) -> None:
        """Forget an execution that ended; not a later one of the same run, which another
        thread may have claimed and added between this one's last commit and its end."""
        with self._lock:
            if self.journals.get(journal.run_id) is journal:
                del self.journals[journal.run_id]

    def executing(self, owner: str) -> bool:
        """Whether this process executes a run under a lease of ``owner`` (an App's
        ``owner``, or a worker's id)."""
        return any(j.lease.owner == owner for j in list(self.journals.values()))

    def create_overdue(self) -> None:
        """Create the runs executing here whose creation has waited for their first append
        longer than births.VISIBLE_WITHIN (a refusal poisons the journal: its execution
        stops at its next call, as for a lost lease)."""
        for journal in list(self.journals.values()):
            birth = journal.birth
            if birth is not None and birth.overdue():
                with suppress(TetherError):
                    journal.flush(born=True)

    def interrupt(self, run_id: str, exc: BaseException) -> None:
        """Stop a run executing in this process at its next position (``exc`` is raised
        there: Stopping puts it back in the queue, Cancelling cancels it); nothing when
        it does not execute here."""
        journal = self.journals.get(run_id)
        if journal is not None:
            journal.interrupt(exc)


class Leases:
    """Claims runs for ``deps.owner``, gives their leases back, and keeps them alive."""

    def __init__(self, deps: Deps, active: Active) -> None:
        self.deps = deps
        self.active = active
        self._letting_go: dict[str, tuple[int, Transition | None]] = {}  # see let_go
        self._letting_go_lock = threading.Lock()
        self._clock_offset: float | None = None  # measured by check_clock, once
        self._heartbeat: _Heartbeat | None = None

    def claim(self, record: RunRecord) -> Lease:
        """Claim ``record``'s run for this process (taking it over from a dead local holder)."""
        self.check_clock()
        holder = record.lease_owner
        takeover = holder if holder and owner_is_dead_local(holder) else None
        d = self.deps
        return d.store.claim(
            record.id, owner=d.owner, ttl=d.lease_ttl, now=d.clock.now(), takeover=takeover
        )

    def let_go(
        self, run_id: str, epoch: int, transition: Transition | None = None, *, again: bool = False
    ) -> bool:
        """Give back the lease (``epoch``) of a run this process no longer executes: release
        it, or make the run ``transition`` (e.g. queued again, due later). Best effort: when
        the database refuses (it is down), the heartbeat thread tries again every second
        (``again``: such a try, which logs nothing), since a heartbeat would otherwise
        extend the lease for as long as this process lives. Returns whether the lease is
        given back (or another process holds the run now)."""
        store, clock = self.deps.store, self.deps.clock
        try:
            for attempt in (1, 2):  # a lost connection fails once: the store then replaces it
                try:
                    if transition is None:
                        store.release(run_id, epoch=epoch)
                    else:
                        store.append(
                            run_id,
                            [],
                            expected_seq=0,
                            epoch=epoch,
                            transition=transition,
                            now=clock.now(),
                        )
                    break
                except StoreError:
                    if attempt == 2:
                        raise
        except (LeaseLost, NotFound):
            pass  # another process holds it now; or it was never created (engine.births)
        except Exception as e:
            with self._letting_go_lock:
                self._letting_go[run_id] = (epoch, transition)
            if not again:
                log.warning("could not give run %s back yet (retried every second): %s", run_id, e)
            return False
        with self._letting_go_lock:
            self._letting_go.pop(run_id, None)
        return True

    def unwritten_end(self, run_id: str, epoch: int) -> None:
        """A worker run's final event was not committed (Store.unwritten_end, called where
        the store found out, so no write here): the heartbeat thread gives its lease back
        within a second, and the worker that claims it writes the event again."""
        with self._letting_go_lock:
            self._letting_go[run_id] = (epoch, None)

    def retry_let_go(self) -> None:
        """Try again to give back the leases :meth:`let_go` could not (the heartbeat
        thread, every second; nothing to do nearly always)."""
        with self._letting_go_lock:
            pending = list(self._letting_go.items())
        for run_id, (epoch, transition) in pending:
            self.let_go(run_id, epoch, transition, again=True)

    def check_clock(self) -> float:
        """Seconds the database's clock is ahead of this process's; ``tether.ClockSkew`` when
        they differ by more than a third of a lease.

        A lease is a due time written with its holder's clock and judged expired by other
        processes' clocks, on other machines. A process whose clock is ahead sees live
        leases as expired (and takes their runs while they still execute: a step runs
        twice); one whose clock is behind writes leases that expire early. Measured once
        per App, before its first lease (a worker's start, the first ``app.run`` or
        resume; later calls return that measure), and logged from a second off. An
        injected clock (``clock=``, a test's own time) is not checked.
        """
        if self._clock_offset is not None:
            return self._clock_offset
        store, clock, ttl = self.deps.store, self.deps.clock, self.deps.lease_ttl
        if not isinstance(clock, SystemClock):
            return 0.0
        offset = store.clock_offset(clock.now)
        if abs(offset) > ttl / 3:
            raise ClockSkew(
                f"this machine's clock is {abs(offset):.1f} s "
                f"{'behind' if offset > 0 else 'ahead of'} the database's at "
                f"{getattr(store, 'where', 'the store')}: "
                f"leases last {ttl:g} s and are checked against other machines' "
                f"clocks, so with more than a third of that ({ttl / 3:.1f} s) off a "
                f"live run could be taken by a second process. Synchronise this machine's clock "
                f"(NTP, chrony), or raise lease_ttl in tether.open(...)."
            )
        if abs(offset) > 1.0:
            log.warning(
                "this machine's clock is %.1f s %s the database's; leases of %g s tolerate "
                "up to %.1f s: synchronise it (NTP, chrony)",
                abs(offset),
                "behind" if offset > 0 else "ahead of",
                ttl,
                ttl / 3,
            )
        self._clock_offset = offset
        return offset

    def keep(self) -> None:
        """Start the heartbeat thread that extends this process's leases (once)."""
        if self._heartbeat is None or not self._heartbeat.is_alive():
            self._heartbeat = _Heartbeat(self)
            self._heartbeat.start()

    def stop(self) -> None:
        """Stop the heartbeat thread."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None


def heartbeat(
    leases: Leases,
    owner: str,
    stopping: threading.Event,
    interval: float,
    beat: Callable[[], dict[str, int]],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Until ``stopping`` is set: ``beat()`` every ``interval`` seconds of ``clock`` (it extends
    ``owner``'s leases and returns its runs asked to cancel) and, between beats while
    ``owner`` executes runs in this process, read those requests every CANCEL_POLL
    seconds, so that `tether cancel` stops a run at its next step within about a second,
    not a third of the lease's ttl. Every CANCEL_POLL seconds too, give back the leases
    Leases.let_go could not. A failure is logged; the next call retries."""
    tick = min(interval, CANCEL_POLL)
    beat_at = clock() + interval
    active, store = leases.active, leases.deps.store
    while not stopping.wait(tick):
        try:
            leases.retry_let_go()  # leases not given back yet (before any are extended)
            active.create_overdue()  # children executing longer than a second: listed
            if clock() >= beat_at - tick / 2:
                beat_at = clock() + interval
                cancels = beat()
            elif active.executing(owner):
                cancels = store.cancel_requests(owner)
            else:
                continue
            for run_id, flag in cancels.items():
                active.interrupt(run_id, Cancelling(compensate=flag == 2))
        except Exception as e:  # a missed beat is not fatal; the next one retries
            log.warning("%s: heartbeat failed: %s", owner, e)


class _Heartbeat(threading.Thread):
    """Extends the leases of ``leases.deps.owner`` every third of their ttl."""

    def __init__(self, leases: Leases) -> None:
        super().__init__(name="tether-heartbeat", daemon=True)
        self.leases = leases
        self._stop_event = threading.Event()

    def run(self) -> None:
        d = self.leases.deps
        interval = max(0.05, d.lease_ttl / 3)
        heartbeat(self.leases, d.owner, self._stop_event, interval, self._beat)

    def _beat(self) -> dict[str, int]:
        d = self.leases.deps
        return d.store.worker_heartbeat(d.owner, ttl=d.lease_ttl, now=d.clock.now())[1]

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
