"""Workers: claim runs from queues, execute them under a lease, heartbeat, stop gracefully.

::

    app.queue("default", concurrency=50, per_key=2, rate=(100, 60), max_depth=10_000)
    run_id = app.start(triage, ticket="T-1", queue="default")
    app.worker(queues=["default"], concurrency=8).run()     # or: tether worker --app m:app

A run whose code no longer matches its log (a deploy changed the agent under it)
is recorded ``blocked`` and the worker moves on: a blocked run holds no lease, is
never claimed, and nothing is undone; ``tether retry`` puts it back in its queue
once the code is restored or patched.

A claim is a lease with an expiry and a fencing token (the run's epoch): every
append carries the token, so a worker that lost its lease (paused, partitioned,
presumed dead) cannot write. A heartbeat extends the worker's leases every
third of their time to live. A worker killed with SIGKILL loses its leases at
expiry (or at once, when a worker on the same host and pid namespace sees its process
is gone), and another worker resumes its runs from their logs. Waiting runs hold no lease;
what ends their wait (a decision, a signal, a due time) makes them claimable.

A worker whose runs are short claims ahead (``prefetch``): besides the runs it
executes, it holds up to ``concurrency`` more under lease, so that a run that
ends hands its slot to the next one at once and claims come in batches (one
claim statement for several runs instead of one per run). A run so held starts
when a slot of this worker frees, about one run's duration later; that is why
``prefetch=None`` (the default) claims ahead only while this worker's recent
runs took under ``PREFETCH_BELOW`` seconds on average, and never from a queue
with limits (a held run counts against them). ``prefetch=0`` turns it off.

On SIGTERM (or :meth:`Worker.stop`) a worker stops claiming, lets each run finish
the step it is in, records it, releases the lease and puts the run back in the
queue for another worker; the runs it claimed ahead and never started are
released for another worker at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from math import inf
from typing import TYPE_CHECKING, Any

from tether.engine import observe
from tether.engine.calls import Stopping
from tether.engine.deps import Deps
from tether.engine.executor import Executor
from tether.engine.leases import CANCEL_POLL as CANCEL_POLL
from tether.engine.leases import heartbeat
from tether.errors import (
    Conflict,
    InvalidInput,
    LeaseLost,
    NondeterminismError,
    NotFound,
    RunFailed,
    StoreUnavailable,
    TetherError,
)
from tether.model import inputs
from tether.model.clock import process_owner
from tether.model.status import RunStatus
from tether.services import cpus, poison
from tether.services.poison import ATTEMPT_FAILED as ATTEMPT_FAILED
from tether.services.poison import described as _described
from tether.services.queues import QueueConfig as QueueConfig
from tether.services.queues import Queues
from tether.services.schedules import Schedules
from tether.services.workers import describe as describe
from tether.services.workers import reap_dead_workers as reap_dead_workers
from tether.store import Lease, QueueLimits, RunRecord, Transition, WorkerRecord

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("tether.services.worker")
# When a starting worker counts the live workers again (seconds after it starts; it counts
# them first as it starts), so that it sees the others that start with it (workers
# started together register within tens of milliseconds; till it sees them, a PostgreSQL
# worker batches as a lone one, with more commits); afterwards each heartbeat counts them.
SHARING_COUNTS = (0.05, 0.15, 0.5, 2.0)
# prefetch=None claims ahead while this worker's runs take less than this on average
# (seconds): a run claimed ahead then waits at most about this long for a slot.
PREFETCH_BELOW = 0.05
# A run the database failed under (a lost connection, say) is due again this many seconds
# later, and a claiming loop the database failed claims again as soon: long enough not to
# spin while the database restarts, short for a blip, and never longer however long it
# stays away (work resumes within about this long of its return)
RESUME_AFTER = 1.0
# A claiming loop that meets another error (a bug, a damaged row) claims again after this
# many seconds, doubled after each failure in a row up to BACKOFF_MAX
BACKOFF, BACKOFF_MAX = 1.0, 30.0
# A "poison run": executions that end in an error escaping the executor (not the run's own
# failure, which the run records) this many times in a row, the log at the same seq each
# time, fail the run instead of giving it back to its queue again (Worker(poison_after=)).
POISON_AFTER = 3
RUN_TIME_WEIGHT = 0.2  # of the newest run in the moving average of run durations


MAX_CONCURRENCY = 10_000  # runs one worker executes at once (threads): more is a typo


def check_worker(queues: Sequence[str], concurrency: int, prefetch: int | None) -> None:
    """``app.worker``'s options, checked before a worker exists (the rest:
    :class:`Worker`'s checks): InvalidInput naming the parameter."""
    if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
        raise InvalidInput(
            f"queues is a list of queue names, e.g. ['default'], not {inputs.show(queues)}"
        )
    for q in queues:
        inputs.name(q, "queues: a queue")
    for what, n in (("concurrency", concurrency), ("prefetch", prefetch)):
        if isinstance(n, int) and n > MAX_CONCURRENCY:  # the rest: Worker's checks
            raise InvalidInput(f"{what} must be at most {MAX_CONCURRENCY} runs, not {n}")


@dataclass
class WorkerStats:
    """What a worker did."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    waiting: int = 0
    interrupted: int = 0
    paused: int = 0  # the database went away under them: back in their queue, not failed
    blocked: int = 0  # their code no longer matches their log: blocked, not claimed again
    errors: list[str] = field(default_factory=list)


class Worker:
    """Claims runs from ``queues`` and executes up to ``concurrency`` of them at once."""

    def __init__(
        self,
        deps: Deps,
        executor: Executor,
        configs: Queues,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 8,
        poll: float = 0.2,
        worker_id: str | None = None,
        cpu: int | str | None = None,
        prefetch: int | None = None,
        poison_after: int = POISON_AFTER,
        schedules: Schedules | None = None,
    ) -> None:
        if isinstance(poison_after, bool) or not isinstance(poison_after, int) or poison_after < 1:
            raise ValueError(
                f"poison_after is how many executions in a row may end in an error outside "
                f"the run's steps before the run is failed (an int >= 1), not {poison_after!r}"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"concurrency is how many runs execute at once (an int >= 1), not {concurrency!r}"
            )
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < inf:
            raise ValueError(
                f"poll is the seconds between claims when idle (above 0), not {poll!r}"
            )
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise ValueError(
                f"prefetch is how many runs to claim ahead (an int >= 0; 0: never) or None "
                f"(while runs are short), not {prefetch!r}"
            )
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.deps = deps
        self.executor = executor  # executes the runs claimed, under its leases
        self.leases = executor.leases
        self.configs = configs  # the queues' flow control
        self.queues = list(queues)
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.poison_after = poison_after
        self.poll = poll
        self.cpu = cpus.check(cpu)  # None, a CPU number, or "auto" (see tether.services.cpus)
        self.pinned: int | None = None  # the CPU run() pinned this process to
        self.id = worker_id or f"worker:{process_owner()}"
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        # (run id, lease epoch) -> its queue: keyed by the claim, not the run alone, for a
        # run that waits may be woken and claimed again (by another of this worker's
        # threads) before the execution that waited has ended and left this map
        self._active: dict[tuple[str, int], str] = {}
        self._lock = threading.Lock()
        self._reserved = 0  # slots that claims in flight may fill (under _lock)
        self._ended = 0  # runs this worker finished executing (under _lock): see _loop
        # one claim at a time, unless claims share commits (Store.concurrent_claims)
        self._claiming: AbstractContextManager[Any] = (
            nullcontext() if deps.store.concurrent_claims else threading.Lock()
        )
        self._pool: ThreadPoolExecutor | None = None
        self._max_runs: int | None = None
        self._wake = threading.Event()  # set when a run ends here: capacity came back
        self._ready: deque[tuple[RunRecord, Lease]] = deque()  # claimed ahead, not started
        self.run_time: float | None = None  # moving average of this worker's run durations
        self.schedules = schedules  # fires the due ticks of its queues' schedules
        self._fired_at = -inf  # when it last looked for due ticks (monotonic)

    # -- lifecycle --------------------------------------------------------

    def run(
        self, *, until_idle: bool = False, max_runs: int | None = None, install_signals: bool = True
    ) -> WorkerStats:
        """Claim and execute until stopped (SIGTERM, :meth:`stop`), or until no run is
        claimable and none executes (``until_idle``), or after ``max_runs`` claims."""
        if max_runs is not None and (
            isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1
        ):
            raise ValueError(
                f"max_runs is a number of claims (an int >= 1) or None, not {max_runs!r}"
            )
        self._max_runs = max_runs
        self.leases.check_clock()  # leases compare clocks across machines: refuse a skewed one
        self.pin()
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
        self._register()
        # a dead worker of this host gives its runs back before the first claim, not at
        # this worker's first heartbeat: a worker started to replace it (with until_idle,
        # which would find nothing claimable and exit) takes them at once
        self._count_sharing(reap_dead_workers(self.deps, exclude=self.id))
        beat = threading.Thread(target=self._heartbeat_loop, name="tether-worker-beat", daemon=True)
        beat.start()
        from concurrent.futures import ThreadPoolExecutor  # lazily: only workers need it

        pool = self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tether-run")
        try:
            self._loop(pool, until_idle, max_runs)
        finally:
            self._stopping.set()
            self._interrupt_all()
            pool.shutdown(wait=True)
            self._release_ready()
            beat.join(timeout=5)
            try:
                self.deps.store.flush()  # the runs' final events, posted without waiting
                self.deps.store.remove_worker(self.id, expire_leases=False)
            except StoreUnavailable as e:  # its row is reaped once its heartbeat is old
                log.warning("worker %s stopped without saying so to the database: %s", self.id, e)
            if self.cpu == cpus.AUTO:
                cpus.unpin()
        return self.stats

    def pin(self) -> int | None:
        """Pin this process to the worker's ``cpu`` (once; run() does it): the CPU, or None
        when the worker has no ``cpu``. ValueError for a CPU the process may not use."""
        if self.cpu is not None and self.pinned is None:
            self.pinned = cpus.pin(self.cpu)
        return self.pinned

    def stop(self) -> None:
        """Stop claiming; running runs finish their current step and go back to the queue."""
        self._stopping.set()
        self._wake.set()

    def _register(self) -> None:
        host, pid = os.uname().nodename, os.getpid()
        now = self.deps.clock.now()
        self.deps.store.register_worker(
            WorkerRecord(
                self.id,
                host,
                pid,
                self.queues,
                self.concurrency,
                now,
                now,
                serves=self.executor.registry.serving,
            ),
            now=now,
        )

    # -- claiming ---------------------------------------------------------

    def _loop(self, pool: ThreadPoolExecutor, until_idle: bool, max_runs: int | None) -> None:
        """Claim until stopped. No error of the database (or of tether) ends it: each is
        logged and claiming starts again after a pause (see RESUME_AFTER, BACKOFF)."""
        started, counts = time.monotonic(), list(SHARING_COUNTS)
        failures = 0  # claiming loops in a row that failed with an error other than an outage
        while not self._stopping.is_set():
            if max_runs is not None and self.stats.claimed >= max_runs:
                break
            if counts and time.monotonic() - started >= counts[0]:
                counts.pop(0)
                self._count_sharing()
            try:
                with self._lock:
                    ended = self._ended
                self._fire_schedules()
                claimed = self._claim_and_submit(max_runs)
                if claimed:
                    continue
                with self._lock:
                    # idle: no run, no claim in flight, and none ended while this claim
                    # looked (a run that ends frees a queue's slot the claim found taken)
                    idle = not self._active and not self._reserved and self._ended == ended
                if until_idle and idle and claimed == 0:
                    break
                # runs' final events posted without waiting must not wait for a write that
                # may not come while this worker sleeps (no claim took them)
                self.deps.store.flush(wait=False)
                self.deps.store.wait_for_work(self.queues, self.poll, self._wake)
            except StoreUnavailable as e:  # a restart, a failover, a full disk: a bit later
                log.warning("worker %s: the database is unavailable (%s); it retries", self.id, e)
                self._stopping.wait(RESUME_AFTER)
            except Exception as e:  # a damaged row, a bug: logged, and claiming goes on
                delay = min(BACKOFF_MAX, BACKOFF * 2**failures)
                failures += 1
                log.error("worker %s could not claim (%s); it retries in %g s", self.id, e, delay)
                self._stopping.wait(delay)
            else:
                failures = 0
            self._wake.clear()

    def _fire_schedules(self) -> None:
        """Start the runs of the due ticks of this worker's queues' schedules (looked for
        every ``poll`` seconds at most; see tether.services.schedules)."""
        now = time.monotonic()
        if self.schedules is not None and now >= self._fired_at + self.poll:
            self._fired_at = now
            self.schedules.fire_due(self.queues)

    def _count_sharing(self, workers: Iterable[WorkerRecord] | None = None) -> None:
        """Tell the store how many live workers share the database (it may size its
        batching to it: PostgresStore.workers_sharing); ``workers``: as just listed."""
        try:
            now = self.deps.clock.now()
            listed = self.deps.store.list_workers() if workers is None else workers
            live = sum(now - w.heartbeat_at <= 3 * self.deps.lease_ttl for w in listed)
            self.deps.store.workers_sharing(max(1, live))
        except Exception as e:  # only a hint: the next count retries
            log.warning("worker %s could not count the live workers: %s", self.id, e)

    def _claim_and_submit(self, max_runs: int | None) -> int | None:
        """Claim what fits and hand it to the pool; the number claimed, or None when this
        worker had no room."""
        claims = self._claim(max_runs)
        if claims is None:
            return None
        for claimed in claims:
            self._hand_off(claimed)
        return len(claims)

    def _claim(self, max_runs: int | None) -> list[tuple[RunRecord, Lease]] | None:
        """Claim what fits (each claimed run counts as active at once), or None when this
        worker had no room.

        Where claims share commits (``Store.concurrent_claims``), threads claim at once,
        each for the room it reserved: a claim waits for a commit, and one claim at a
        time capped a worker at one claim per commit latency. Elsewhere one claim at a
        time takes every slot that came free meanwhile. The database keeps the queues'
        global limits; the reservations keep this worker's.
        """
        with self._claiming:
            return self._claim_room(max_runs)

    def _claim_room(self, max_runs: int | None) -> list[tuple[RunRecord, Lease]] | None:
        with self._lock:
            if self._stopping.is_set():
                return None
            free = self.concurrency + self._ahead() - len(self._active) - self._reserved
            if max_runs is not None:
                free = min(free, max_runs - self.stats.claimed - self._reserved)
            if free <= 0:
                return None
            limits = self._limits()
            if not limits:
                return None
            self._reserved += free
        claims: list[tuple[RunRecord, Lease]] = []
        try:
            now = self.deps.clock.now()
            claims = self.deps.store.claim_next(
                limits,
                owner=self.id,
                ttl=self.deps.lease_ttl,
                now=now,
                capacity=free,
                serving=self.executor.registry.serving,  # the versions its code finishes
            )
        finally:
            with self._lock:
                self._reserved -= free
                for record, lease in claims:
                    self._active[record.id, lease.epoch] = record.queue or ""
                self.stats.claimed += len(claims)
        return claims

    def _ahead(self) -> int:
        """Under ``_lock``: how many runs this worker may hold claimed ahead of its slots
        (``prefetch``); none when a queue of it has limits, where a held run would count."""
        if any(self.configs.config(name).limited for name in self.queues):
            return 0
        if self.prefetch is not None:
            return self.prefetch
        short = self.run_time is not None and self.run_time < PREFETCH_BELOW
        return self.concurrency if short else 0

    def _limits(self) -> list[QueueLimits]:
        """Under ``_lock``: the queues that still have room in this worker, with their
        global limits and the room left in this worker (``worker_concurrency``; a claim in
        flight may fill its whole reservation from any queue)."""
        busy: dict[str, int] = {}
        for queue in self._active.values():
            busy[queue] = busy.get(queue, 0) + 1
        out = []
        for name in self.queues:
            config = self.configs.config(name)
            limits = config.limits()
            if config.worker_concurrency is not None:
                room = config.worker_concurrency - busy.get(name, 0) - self._reserved
                if room <= 0:
                    continue
                limits = replace(limits, room=room)
            out.append(limits)
        return out

    # -- executing --------------------------------------------------------

    def _execute(self, record: RunRecord, lease: Lease) -> None:
        """Execute a claimed run, then claim and execute the next ones in this thread while
        there are any: a run that ends hands its slot on without waking the claiming loop
        (two thread hand-offs less per run)."""
        claimed: list[tuple[RunRecord, Lease]] | None = [(record, lease)]
        while claimed:
            (record, lease), *more = claimed
            for other in more:  # more room than this thread: the pool takes the rest
                self._hand_off(other)
            self._execute_one(record, lease)
            try:
                claimed = self._next_ready() or self._claim(self._max_runs)
            except Exception as e:  # the claiming loop claims again (and logs what it meets)
                log.warning("worker %s could not claim: %s", self.id, e)
                claimed = None
        self._wake.set()  # nothing to claim here: the loop waits for work

    def _give_back(self, record: RunRecord, lease: Lease, after: float | None = None) -> None:
        """Put a run this worker could not execute back in its queue, due again ``after``
        seconds from now (default: one lease ttl; its agent's code cannot be imported here,
        say), so that the heartbeat does not renew its lease for as long as this worker
        lives. Nothing is appended to its log. When the database refuses, the worker's
        heartbeat tries again (Leases.let_go)."""
        delay = self.deps.lease_ttl if after is None else after
        later = Transition(
            RunStatus.QUEUED, release=True, available_at=self.deps.clock.now() + delay
        )
        if self.leases.let_go(record.id, lease.epoch, later):
            log.warning(
                "worker %s gave run %s back to its queue; it is due again in %g s",
                self.id,
                record.id,
                delay,
            )

    def _fruitless(self, record: RunRecord, lease: Lease, error: Exception) -> None:
        """An execution ended in ``error`` outside the run's steps: count it and give the
        run back to its queue; the ``poison_after``-th in a row with the log at the same
        seq fails the run instead (see :mod:`tether.services.poison`)."""
        try:
            if poison.count(self.deps, record, lease, error, self.id, self.poison_after):
                self.stats.failed += 1
                return
        except TetherError as e:
            log.warning("worker %s could not count run %s's attempts: %s", self.id, record.id, e)
        self._give_back(record, lease)

    def _next_ready(self) -> list[tuple[RunRecord, Lease]] | None:
        """A run claimed ahead, for a thread whose run ended (the claiming loop is woken
        to claim more once half of them are gone), or None."""
        with self._lock:
            if not self._ready or self._stopping.is_set():
                return None
            claimed = self._ready.popleft()
            refill = len(self._ready) <= self._ahead() // 2
        if refill:
            self._wake.set()
        return [claimed]

    def _release_ready(self) -> None:
        """Give back the leases of the runs claimed ahead and never started (stopping):
        another worker claims them at once, and the queues' workers are told."""
        with self._lock:
            ready, self._ready = list(self._ready), deque()
            for record, lease in ready:
                self._active.pop((record.id, lease.epoch), None)
        queues = set()
        for record, lease in ready:
            try:
                self.deps.store.release(record.id, epoch=lease.epoch)
                if record.queue:
                    queues.add(record.queue)
            except Exception as e:  # its lease expires instead: another worker takes it then
                log.warning("worker %s could not release run %s: %s", self.id, record.id, e)
        for queue in sorted(queues):
            with suppress(Exception):
                self.deps.store.notify_work(queue)

    def _hand_off(self, claimed: tuple[RunRecord, Lease]) -> None:
        """Give a claimed run to the pool; hold it (claimed ahead) while every slot is
        busy; or execute it in this thread when the pool is shutting down (a claim that
        was in flight when the worker stopped)."""
        assert self._pool is not None
        with self._lock:  # every slot busy: it waits for one, claimed ahead
            if len(self._active) - len(self._ready) > self.concurrency:
                self._ready.append(claimed)
                return
        try:
            self._pool.submit(self._execute, *claimed)
        except RuntimeError:  # "cannot schedule new futures after shutdown"
            self._execute_one(*claimed)

    def _execute_one(self, record: RunRecord, lease: Lease) -> None:
        began = time.monotonic()
        outcome = "error"
        try:
            handle = self.executor.execute_claimed(record, lease)
        except RunFailed:
            self.stats.failed += 1
            outcome = "failed"
        except NondeterminismError as e:  # recorded as blocked: no lease, never claimed again
            self.stats.blocked += 1
            outcome = "blocked"
            log.warning("worker %s: run %s is blocked: %s", self.id, record.id, e)
        except (LeaseLost, Conflict) as e:
            outcome = "lost"
            log.warning("worker %s lost run %s: %s", self.id, record.id, e)
        except (Stopping, KeyboardInterrupt):
            self.stats.interrupted += 1
            outcome = "interrupted"
            if record.queue:  # it went back to its queue: another worker takes it now
                with suppress(Exception):
                    self.deps.store.notify_work(record.queue)
        except StoreUnavailable as e:  # the database went away under the run: paused
            self.stats.paused += 1
            outcome = "paused"
            log.warning("worker %s: run %s paused: %s", self.id, record.id, e)
            self._give_back(record, lease, RESUME_AFTER)
        except NotFound as e:  # its agent is not here, or the run is gone: not its fault
            self.stats.errors.append(f"{record.id}: {e}")
            log.error("worker %s could not execute run %s: %s", self.id, record.id, e)
            self._give_back(record, lease)
        except Exception as e:  # outside the run's steps (a damaged log, a bug): not fatal
            self.stats.errors.append(f"{record.id}: {_described(e)}")
            log.error("worker %s could not execute run %s", self.id, record.id, exc_info=True)
            self._fruitless(record, lease, e)
        else:
            if handle.status == RunStatus.WAITING:
                self.stats.waiting += 1
                outcome = "waiting"
            else:
                self.stats.completed += 1
                outcome = str(handle.status)
        finally:
            took = time.monotonic() - began
            if observe.OBSERVER is not None:
                observe.OBSERVER.execution(record.agent, outcome, took)
            with self._lock:
                self._active.pop((record.id, lease.epoch), None)
                self._ended += 1
                average = self.run_time
                self.run_time = (
                    took if average is None else average + RUN_TIME_WEIGHT * (took - average)
                )

    def _interrupt_all(self) -> None:
        with self._lock:
            ids = [run_id for run_id, _ in self._active]
        for run_id in ids:
            self.leases.active.interrupt(run_id, Stopping("the worker is stopping"))

    # -- heartbeat --------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = max(0.02, self.deps.lease_ttl / 3)
        heartbeat(self.leases, self.id, self._stopping, interval, self._beat)

    def _beat(self) -> dict[str, int]:
        store, now = self.deps.store, self.deps.clock.now()
        stop, cancels = store.worker_heartbeat(self.id, ttl=self.deps.lease_ttl, now=now)
        if stop:
            self.stop()
        self._count_sharing(reap_dead_workers(self.deps, exclude=self.id))
        return cancels
