"""Replay by position: the one core behind sync and async agents.

The agent function runs again from the top on every resume. Each tether call
takes the next *position* when it is made, in the program's order of calls (an
``AsyncRun`` call takes it before it is awaited, so ``asyncio.gather`` of calls
numbers them in argument order whatever finishes first). If the log holds a
completed entry at that position with the same kind and name, its recorded output
is returned and nothing runs; a different name is
:class:`~tether.errors.NondeterminismError`; an entry that never completed (in
flight at a crash, or retrying), or a position with no record at all (a fan-out's
branch still in flight when a later one finished), is executed again, its attempts
counted on from the log.

Positions whose order would depend on timing are refused when the call is made
(InvalidState), not found out at a resume: a call from a thread other than the
agent's (outside ``run.map``/``run.parallel``, which take their positions in order
first), and a second call of an asyncio task while another task's call is in
flight. A Journal is shared by the threads of a fan-out: positions, appends and the
deferred records are taken under its lock.

The step logic is written once, as generators (:func:`tether.engine.steps.step_core`)
that yield commands (:class:`~tether.engine.calls.Call`,
:class:`~tether.engine.calls.Sleep`); :mod:`tether.engine.runtime` drives them either
synchronously or with ``await``. There are no sync/async twins.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.engine import children, observe
from tether.engine.births import Birth
from tether.engine.calls import Slot, Suspended, current_task
from tether.engine.children import Spawner
from tether.engine.limits import Meter
from tether.engine.retry import Retry
from tether.engine.tracing import RunTrace
from tether.engine.workspace import Checkpoints
from tether.errors import (
    EncodeError,
    InvalidState,
    LeaseLost,
    NondeterminismError,
    StoreUnavailable,
)
from tether.model import codec, inputs, secrets
from tether.model import events as ev
from tether.model.clock import Clock
from tether.model.events import NewEvent
from tether.model.redact import error_info as error_info  # where the engine imports it
from tether.model.state import RunState
from tether.model.status import UNRECORDED, EffectStatus, RunStatus
from tether.model.steps import StepState, differs, usage_of
from tether.store import EffectWrite, Lease, SignalTake, Store, Transition

MAX_INPUT_REPR = 2000
# A step faster than this (never a model call) has its record written with the run's next
# append (Journal.record_success): a crash before it runs the step again, cheaper than the
# commit it saves. A slower one is written at once.
DEFER_BELOW = 0.05  # seconds


@dataclass(slots=True)
class Reserved:
    """The position a fan-out reserved for one branch (:meth:`Journal.reserve`): the
    branch's one journaled call takes it, wherever and whenever it is made."""

    journal: Journal
    pos: int
    used: bool = False

    def take(self, kind: str, name: str) -> int:
        if self.used:
            raise InvalidState(
                f"run {self.journal.run_id}: {kind} {name!r} is a second journaled call in one "
                f"branch of run.parallel (its position, {self.pos}, went to the first); a branch "
                f"makes one call: give each call a branch of its own, or make this one after "
                f"run.parallel returns"
            )
        self.used = True
        return self.pos


# The reservation of the fan-out branch this context executes (see Journal.reserve).
_RESERVED: contextvars.ContextVar[Reserved | None] = contextvars.ContextVar(
    "tether_reserved", default=None
)


@contextlib.contextmanager
def branch(reserved: Reserved) -> Iterator[None]:
    """Execute a fan-out's branch here: its journaled call takes ``reserved``'s position."""
    token = _RESERVED.set(reserved)
    try:
        yield
    finally:
        _RESERVED.reset(token)


class Journal:
    """A run's log as seen by one execution: positions, replay, appends with the lease."""

    patches: dict[str, str] | None = None  # a dry replay's: the patches the run relies on
    inline_child: Journal | None = None  # an inline child executing in this one's thread
    inline = False  # this run is an inline child executed by its parent: nobody to wake
    workspace: Checkpoints | None = None  # its files, checkpointed after steps (if any)
    birth: Birth | None = None  # its creation, due with its first append (engine.births)

    def __init__(
        self,
        store: Store,
        clock: Clock,
        state: RunState,
        lease: Lease,
        *,
        actor: str | None = None,
        detached_end: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock
        self.run_id = state.run_id
        self.agent = state.agent or ""
        self.lease = lease
        self.seq = state.seq
        self.recorded = state.steps
        self.pos = 0
        self.actor = actor
        self.poisoned: BaseException | None = None
        self.meter: Meter | None = None  # prices and limits (tether.engine.limits), if any
        # a worker's execution: nothing waits for the run's final event, so its append
        # need not wait for the commit (a crash before it replays the run to the same end)
        self.detached_end = detached_end
        self._deferred: list[NewEvent] = []
        self._deferred_transition: Transition | None = None
        self.interrupted: BaseException | None = None  # raised at the next position
        self.reused: list[tuple[int, str]] = []
        self.executed: list[tuple[int, str]] = []
        self.last_failure: tuple[BaseException, dict[str, Any]] | None = None
        self.compensating = state.compensating  # set: resume the compensation, not the agent
        # task variables as of the current position: a run handed off to starts with those
        # it was handed (engine.handoffs)
        self.handed = state.handed
        self.vars: dict[str, Any] = dict((state.handed or {}).get("vars") or {})
        # fan-outs: calls from several threads share this journal (see the module docstring)
        self.lock = threading.RLock()
        self.thread = threading.get_ident()  # the agent's thread
        self.agent_task: object | None = None  # an async agent's task (the executor sets it)
        self.trace: RunTrace | None = None  # this execution's spans (tether.engine.tracing)
        self.spawner: Spawner | None = None  # how run.child starts runs (the executor sets it)
        # a child run's parent ({"run", "pos"}): woken when this run ends (engine.children),
        # after the end's commit (its appends wait for their commit, see _append)
        self.caller = state.caller
        self._took: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._in_flight: dict[Any, int] = {}  # task -> its calls taken and not finished
        self._fork_edits = sorted(state.fork_edits, key=lambda edit: edit[0])
        self._apply_fork_vars()

    def interrupt(self, exc: BaseException | None) -> None:
        """Raise ``exc`` at this execution's next position (a stop or a cancel asked from
        another thread; an inline child executing meanwhile too); None withdraws it."""
        self.interrupted = exc
        if self.inline_child is not None:
            self.inline_child.interrupt(exc)

    def _apply_fork_vars(self) -> None:
        """Each fork's edited variables take effect once replay passes its fork point
        (oldest first, so a fork of a fork sees every ancestor's edits in turn)."""
        while self._fork_edits and self.pos >= self._fork_edits[0][0]:
            self.vars.update(self._fork_edits.pop(0)[1])

    # -- positions --------------------------------------------------------

    def slot(self, kind: str, name: str, digest: str | None = None) -> Slot:
        """Take the next position (or the fan-out branch's reserved one); check it against
        the log (kind, name, tool args)."""
        if (
            type(name) is not str
            or not name
            or len(name) > inputs.NAME_MAX
            or not name.isprintable()
        ):
            inputs.name(name, f"run {self.run_id}: a {kind}'s name")  # says what is wrong
        with self.lock:
            pos = self._take(kind, name)
            recorded = self.recorded[pos - 1] if pos <= len(self.recorded) else None
            if recorded is not None and recorded.status == UNRECORDED:
                recorded = None  # a branch in flight when a later one finished: runs again
            self._check(pos, kind, name, digest, recorded)
            if self.birth is not None and (kind != "step" or name.startswith("board ")):
                self._append([], None, (), True)  # a row elsewhere names the run: see births
            slot = Slot(pos, kind, name, recorded)
            if slot.done:
                self.reused.append((slot.pos, name))
            elif self.meter is not None:
                self.meter.check(self, slot)  # a limit reached: wait or fail, before the call
            self._apply_fork_vars()
            return slot

    def reserve(self, n: int) -> int:
        """Take the next ``n`` (>= 1) positions at once, in order, for a fan-out's branches
        (see :class:`Reserved`); return the first. Checked as a call made here."""
        with self.lock:
            reserved = _RESERVED.get()
            if reserved is not None and reserved.journal is self:
                return self._poison_on(self._nested, "fan-out", "run.parallel")
            first = self._take("fan-out", f"of {n} branches")
            self.pos += n - 1
            self._apply_fork_vars()
            return first

    def _nested(self, kind: str, name: str) -> int:
        raise InvalidState(
            f"run {self.run_id}: a fan-out (run.parallel or run.map) inside a branch of "
            f"run.parallel; a branch makes one journaled call: fan out from the agent itself"
        )

    def _take(self, kind: str, name: str) -> int:
        if self.poisoned is not None:
            raise self.poisoned
        if self.interrupted is not None:
            raise self.interrupted
        reserved = _RESERVED.get()
        if reserved is not None and reserved.journal is self:
            return self._poison_on(reserved.take, kind, name)
        if threading.get_ident() != self.thread:
            return self._poison_on(self._other_thread, kind, name)
        if self.agent_task is not None:
            self._poison_on(self._check_task, kind, name)
        self.pos += 1
        return self.pos

    def _poison_on(self, check: Callable[[str, str], int], kind: str, name: str) -> int:
        """``check(kind, name)``; what it raises also fails the run's later calls and its
        end, so that a branch whose error nobody reads (a thread's) still fails the run."""
        try:
            return check(kind, name)
        except InvalidState as e:
            self.poisoned = e
            raise

    def _other_thread(self, kind: str, name: str) -> int:
        raise InvalidState(
            f"run {self.run_id}: {kind} {name!r} was called from a thread other than the "
            f"agent's, so its position would depend on which thread got there first (a resume "
            f"would find the steps out of order). Fan out with run.map(name, fn, items) or "
            f"run.parallel(lambda: run.step(...), ...): they take the positions in order, then "
            f"run the calls on threads."
        )

    def _check_task(self, kind: str, name: str) -> int:
        """An asyncio task other than the agent's may take one position while other calls
        are in flight (its first, taken in the order the tasks start), not a second: when
        it would take it depends on which call finishes first."""
        task = current_task()
        if task is None or task is self.agent_task:
            return 0
        took = self._took.get(task, 0)
        if took and any(n for t, n in self._in_flight.items() if t is not task):
            raise InvalidState(
                f"run {self.run_id}: {kind} {name!r} is the second journaled call of a "
                f"concurrent asyncio task while another call is in flight, so its position "
                f"would depend on which call finished first (a resume would find the steps out "
                f"of order). Give each concurrent branch one call (asyncio.gather(run.step(...), "
                f"run.llm(...)) numbers them in argument order), use run.parallel or run.map, "
                f"or await one branch's calls before another's."
            )
        self._took[task] = took + 1
        return took + 1

    def _check(
        self, pos: int, kind: str, name: str, digest: str | None, recorded: StepState | None
    ) -> None:
        """Raise NondeterminismError (and poison the journal) when the log recorded another
        step at ``pos``: another kind or name, or a tool call with other arguments."""
        if recorded is None or not differs(recorded, kind, name, digest):
            return
        if recorded.name != name or recorded.kind != kind:
            expected, found = f"{recorded.kind} {recorded.name}", f"{kind} {name}"
        else:
            assert recorded.input_digest is not None and digest is not None
            expected = f"{kind} {name}(args {recorded.input_digest[:12]})"
            found = f"{kind} {name}(args {digest[:12]})"
        err = NondeterminismError(self.run_id, pos, expected, found)
        self.poisoned = err
        raise err

    def begin(self) -> object | None:
        """Count a call taken by the current asyncio task as in flight until :meth:`end`
        (an async agent's calls; see ``_check_task``)."""
        if self.agent_task is None:
            return None
        task = current_task()
        with self.lock:
            self._in_flight[task] = self._in_flight.get(task, 0) + 1
        return task

    def end(self, task: object | None) -> None:
        """The call :meth:`begin` counted finished."""
        if self.agent_task is None:
            return
        with self.lock:
            left = self._in_flight.pop(task, 0) - 1
            if left > 0:
                self._in_flight[task] = left

    def peek(self) -> StepState | None:
        """What the log recorded at the position the next call here takes (None past the
        recorded ones, or where nothing is recorded)."""
        with self.lock:
            reserved = _RESERVED.get()
            mine = reserved is not None and reserved.journal is self
            pos = reserved.pos if reserved is not None and mine else self.pos + 1
            recorded = self.recorded[pos - 1] if pos <= len(self.recorded) else None
        return None if recorded is None or recorded.status == UNRECORDED else recorded

    def fault(self, exc: BaseException) -> BaseException:
        """What stopped the execution: what poisoned this journal (a lost lease or database,
        a code change, a call refused in a thread), else ``exc``. A lost lease or database
        keeps the journal refusing writes; the agent's own fault does not stop tether's
        records (the deferred step, the failure, the block)."""
        poisoned = self.poisoned
        if isinstance(poisoned, LeaseLost | StoreUnavailable):
            return poisoned
        self.poisoned = None
        return poisoned if poisoned is not None else exc

    def raise_poison(self) -> None:
        """Raise what made the journal refuse writes when the agent returned anyway: it
        caught the error (a code change, a lease lost), or a thread of its own met it and
        nobody read it. Its run must not end as if whole. A checkpoint of the last step's
        files that failed (engine.workspace) is raised here too, as the agent's error."""
        if self.poisoned is not None:
            raise self.poisoned
        if self.workspace is not None:
            self.workspace.take(self._deferred, [])

    # -- appends ----------------------------------------------------------

    def append(
        self,
        events: list[NewEvent],
        transition: Transition | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
        *,
        wait: bool = True,
    ) -> None:
        """Append events under this execution's lease (one transaction), after any
        deferred ones (see :meth:`defer`); ``wait=False``: see Store.append. The lock
        keeps the seqs of a fan-out's threads in order."""
        with self.lock:
            self._append(events, transition, writes, wait)

    def _append(
        self,
        events: list[NewEvent],
        transition: Transition | None,
        writes: Sequence[EffectWrite | SignalTake],
        wait: bool,
    ) -> None:
        if self.poisoned is not None:
            raise self.poisoned
        if self.workspace is not None:  # a step's files are committed with its record
            events = self.workspace.take(self._deferred, events)
        if self._deferred:
            events = [*self._deferred, *events]
            transition = transition or self._deferred_transition
            self._deferred, self._deferred_transition = [], None
        try:
            if self.birth is not None:  # the run is created with it (engine.births)
                self.seq, self.birth = self.birth(events, transition, writes), None
            else:
                self.seq = self.store.append(
                    self.run_id,
                    events,
                    expected_seq=self.seq,
                    epoch=self.lease.epoch,
                    transition=transition,
                    writes=writes,
                    now=self.clock.now(),
                    wait=wait or self.caller is not None,  # a child's end: before its wake
                )
        except (LeaseLost, StoreUnavailable) as e:  # fenced out; or the connection died under
            self.poisoned = e  # the write, which may or may not have committed: write no more
            if observe.OBSERVER is not None and isinstance(e, LeaseLost):
                observe.OBSERVER.lease_lost()
            raise
        if self.caller is not None and transition is not None and not self.inline:
            children.wake_caller(self, transition.status)

    def seq_after(self, n: int) -> int:
        """The seq the ``n``-th event of the next append will get (deferred ones first);
        hold :attr:`lock` until that append, or another thread's may come first."""
        with self.lock:
            return self.seq + len(self._deferred) + n

    def defer(self, events: list[NewEvent], transition: Transition | None = None) -> None:
        """Write ``events`` with the next append (group commit): e.g. ``run.started`` rides
        with the first step, saving a commit per execution. A crash before that append
        loses only the record that an execution began, which changed nothing."""
        with self.lock:
            self._deferred.extend(events)
            self._deferred_transition = transition or self._deferred_transition

    def flush(self, *, born: bool = False) -> None:
        """Append a step's deferred record now (see :meth:`record_success`): before a call
        runs (``attempts``), before the run's log is read, before a failure or a cancel;
        ``born``: and the run's creation when it is still due (engine.births)."""
        with self.lock:
            due = born and self.birth is not None
            if due or any(e.type == ev.STEP_COMPLETED for e in self._deferred):  # not run.started
                self._append([], None, (), True)

    def event(self, type_: str, data: dict[str, Any]) -> NewEvent:
        return ev.new(type_, data, self.clock.now(), self.actor)

    def suspend(
        self, events: list[NewEvent], waiting_for: str, available_at: float | None
    ) -> Suspended:
        """Append ``events`` and make the run wait (no lease); return the exception to raise."""
        self.append(
            events,
            Transition(
                RunStatus.WAITING, release=True, available_at=available_at, waiting_for=waiting_for
            ),
        )
        return Suspended(waiting_for)

    # -- records ----------------------------------------------------------

    def record_success(
        self,
        slot: Slot,
        attempt: int,
        digest: str | None,
        output: Any,
        duration: float,
        *,
        key: str | None = None,
        effect: EffectWrite | None = None,
        extra: Mapping[str, Any] | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
    ) -> None:
        """Record a completed step. A fast one's record (under ``DEFER_BELOW``) rides with
        the run's next append, and :meth:`flush` writes it before the next call runs: the
        last step's record shares the run's final commit, a wait's, a decision's or a
        write tool's intent shares theirs, and a step followed by a step costs what it
        did. No other step has seen the result meanwhile; a crash in between runs the
        step again, as a crash during it would. A slower step's record, a model call's, a
        write tool's outcome and a taken signal are appended at once."""
        data = {
            "pos": slot.pos,
            "name": slot.name,
            "kind": slot.kind,
            "attempt": attempt,
            "digest": digest,
            "output": output,
            "duration": round(duration, 6),  # the event's time is the end: start = at - duration
        }  # a model call's usage is folded from its output (state.usage_of): not stored twice
        if key is not None:
            data["key"] = key
        if extra:
            data.update(extra)
        if slot.kind == "llm" and self.meter is not None:
            with self.lock:  # a fan-out's model calls count from several threads
                usage = self.meter.record(output, data.get("model"))
            if usage is not None:  # computed here (prices), or a call that reported none
                data["usage"] = usage
        try:
            event = self.event(ev.STEP_COMPLETED, data)
            no_literal_secret(
                event, output, f"run {self.run_id}: {slot.kind} {slot.name!r}'s result"
            )
            side = [_with_result(effect, output)] if effect is not None else []
        except EncodeError as e:
            raise self._encode_error(slot, e) from None
        if self.workspace is not None:
            self.workspace.after(slot.kind, slot.pos, event)
        slow = duration >= DEFER_BELOW and slot.kind != "child"  # a child is found by its id
        if side or writes or slot.kind == "llm" or slow:
            self.append([event], writes=[*side, *writes])
        else:
            self.defer([event])
        self.executed.append((slot.pos, slot.name))
        if observe.OBSERVER is not None:
            # the usage stored with the step (its cost from prices), else what it reported
            usage = (data.get("usage") or usage_of(output)) if slot.kind == "llm" else None
            observe.OBSERVER.step(slot.kind, self.agent, duration, usage)

    def _encode_error(self, slot: Slot, e: EncodeError) -> EncodeError:
        path = e.path.replace("$.output", "$", 1) if e.path.startswith("$.output") else e.path
        if e.type_name == SECRET_TYPE:  # its own message says what to do
            self.last_failure = (e, self.failure_context(e, slot, None, None))
            return e
        err = EncodeError(
            f"run {self.run_id}: {slot.kind} {slot.name!r} (position {slot.pos}) returned a "
            f"value that cannot be stored: {e.type_name} at {path}. "
            f"{codec.plain_hint(e.type_name)}",
            path=path,
            type_name=e.type_name,
        )
        self.last_failure = (err, self.failure_context(err, slot, None, None))
        return err

    def record_failure(
        self,
        slot: Slot,
        attempt: int,
        digest: str | None,
        exc: BaseException,
        policy: Retry,
        inputs: Any = None,
    ) -> float | None:
        """Append the failed attempt; return the delay before the next one, or None."""
        retry = policy.should_retry(exc, attempt)
        delay = policy.delay(attempt) if retry else None
        now = self.clock.now()
        data = {
            "pos": slot.pos,
            "name": slot.name,
            "kind": slot.kind,
            "attempt": attempt,
            "digest": digest,
            "error": error_info(exc, now),
            "retry_at": now + delay if delay is not None else None,
        }
        self.append([self.event(ev.STEP_FAILED, data)])
        if delay is not None and observe.OBSERVER is not None:
            observe.OBSERVER.retry(slot.kind, self.agent)
        if delay is None:
            self.last_failure = (exc, self.failure_context(exc, slot, digest, inputs))
        return delay

    def failure_context(
        self, exc: BaseException, slot: Slot | None, digest: str | None, inputs: Any
    ) -> dict[str, Any]:
        ctx = error_info(exc, self.clock.now())
        ctx.update(step=None, position=None, kind=None, input_digest=digest, input=None)
        if slot is not None:
            ctx.update(step=slot.name, position=slot.pos, kind=slot.kind)
        if inputs is not None:
            ctx["input"] = _short_repr(inputs)
        return ctx

    def context_for(self, exc: BaseException) -> dict[str, Any]:
        """The failure context of ``exc`` escaping the agent: its step if a step raised it."""
        if self.last_failure is not None and self.last_failure[0] is exc:
            return self.last_failure[1]
        # (a NondeterminismError never gets here: the journal is poisoned with it, so
        # Executor._stopped blocks the run, raising, before it asks)
        return self.failure_context(exc, None, None, None)


SECRET_TYPE = "tether.Secret"  # EncodeError.type_name of a result holding a literal Secret
_SECRET_MARK = f'"{codec.TAG}":"{secrets.TAG}"'  # in the text of an event holding a Secret


def no_literal_secret(event: NewEvent, value: Any, what: str) -> None:
    """Refuse ``value`` (a result, a decision's choice) when it holds a literal Secret: it
    is replayed from the log, which holds only the secret's marker, so a replay could not
    give what the first execution gave. A Secret.env reference replays as itself. Costs a
    substring search unless the event holds a secret's marker."""
    if _SECRET_MARK not in event.data:
        return
    path = secrets.literal_at(value)
    if path is None:
        return
    raise EncodeError(
        f"{what} holds a tether.Secret at {path}: a result is replayed from the log, which "
        f"stores only the secret's marker, never its value, so a replay could not return "
        f"it. Keep the secret out of results (reveal it inside the step or tool that uses "
        f"it), or return a Secret.env('VAR') reference, which is stored as such.",
        path=path,
        type_name=SECRET_TYPE,
    )


def _with_result(effect: EffectWrite, output: Any) -> EffectWrite:
    return EffectWrite(
        effect.key,
        effect.run_id,
        effect.position,
        effect.tool,
        EffectStatus.COMPLETED,
        codec.encode(output, what="tool result"),
    )


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_INPUT_REPR else text[:MAX_INPUT_REPR] + "…"
