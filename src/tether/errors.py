"""The exceptions tether raises, as one tree.

::

    TetherError                      every error tether raises on purpose
    ├── StoreError                   the database cannot be used as a tether store
    │   ├── StoreUnavailable         unreachable, connection lost, or locked too long: retry
    │   │   └── StoreFull            the disk (or the database's size limit) is full: free space
    │   ├── CorruptRecord            a stored row cannot be read (names table, run, seq)
    │   ├── NotATetherDatabase       the file is not SQLite, is corrupt, or is someone else's
    │   ├── SchemaTooNew             written by a newer tether; upgrade tether to open it
    │   ├── RunDamaged               a run's log has gaps or disagrees with its row (names both)
    │   └── ArtifactCorrupt          stored bytes no longer match their SHA-256 (names the digest)
    ├── ClockSkew                    this machine's clock is too far from the database's
    ├── NotFound                     no such run / agent / event (or another tenant's)
    ├── Forbidden                    an identity's role does not allow the action (audited)
    ├── Conflict                     someone else appended first, or holds the run
    │   ├── LeaseLost                a newer lease (fencing token) exists; stop writing
    │   └── VersionConflict          a board's key moved past the expected version: re-read
    ├── QueueFull                    a queue at its max depth refuses new runs (backpressure)
    ├── EncodeError                  a value cannot be stored (names the type and path)
    ├── InvalidInput                 an argument tether does not take (names it)
    ├── NondeterminismError          replay found another step at a recorded position (blocked)
    ├── StepTimeout                  a step attempt ran past its retry policy's timeout
    ├── InvalidState                 the run is not in a state that allows the operation
    │   ├── DecisionRefused          an approval decision that cannot be taken (recorded in audit)
    │   └── RevertRefused            a revert of one effect that cannot be done (nothing written)
    ├── ApprovalDenied               raised inside the agent by a denied (or timed-out) approval
    ├── ContractViolation            a tool call broke its contract (names the rule and value)
    ├── WaitTimeout                  raised inside the agent when ``run.wait`` times out
    ├── BudgetExceeded               a run reached a limit whose policy is "fail" (names it)
    ├── WorkspaceError               a workspace cannot be checkpointed or restored (names the path)
    │   └── WorkspaceLimit           a workspace is over one of its limits (names the limit)
    ├── ChildFailed                  raised inside a parent by ``run.join`` for a failed child
    └── RunFailed                    raised by ``app.run`` when the run ends failed

Some are built-in exceptions too, so that the ``except`` clause a caller already has
catches them:

    CorruptRecord                    also a ValueError
    NotFound                         also a LookupError
    Forbidden                        also a PermissionError
    EncodeError                      also a TypeError
    InvalidInput                     also a ValueError and a TypeError
    StepTimeout                      also a TimeoutError
    WaitTimeout                      also a TimeoutError

Every message says what was wrong, where (run, step, position, field) and what
to do about it. Database driver errors never escape raw: backends translate them
at their boundary into this tree.
"""

from __future__ import annotations

from typing import Any


class TetherError(Exception):
    """Base of every error tether raises on purpose."""


class StoreError(TetherError):
    """The database cannot be used as a tether store."""


class StoreUnavailable(StoreError):
    """The database could not be reached, or the connection to it was lost, or (SQLite)
    another process held it locked too long: try again later. A run this happens under
    is paused, not failed."""


class StoreFull(StoreUnavailable):
    """The disk holding the database is full (SQLite: or the database reached its size
    limit). Nothing of the failed write was stored. Runs it happens under are paused, not
    failed, and workers keep retrying: free space and they go on."""


class CorruptRecord(StoreError, ValueError):
    """A stored row cannot be read: text that is not UTF-8, JSON that does not parse, a
    number that is not one (written by another program, or damaged). The message names
    the table, the run and the seq where it can; tether does not change the row."""


class NotATetherDatabase(StoreError):
    """The file is not a SQLite database, is corrupt, or belongs to another program."""


class SchemaTooNew(StoreError):
    """The database was written by a newer tether than this one."""


class RunDamaged(StoreError):
    """A run's stored log is not whole: events are missing (``missing``: the absent seqs,
    as ``(first, last)`` ranges), or its row's status disagrees with what its log says.
    The run is never resumed as if whole: restore the database from a backup, or export
    what is left (``tether export RUN``) to inspect it."""

    def __init__(
        self, run_id: str, problem: str, missing: tuple[tuple[int, int], ...] = ()
    ) -> None:
        super().__init__(
            f"run {run_id} is damaged: {problem}. It is not resumed as if whole: restore "
            f"the database from a backup, or `tether export {run_id}` what is left to "
            f"inspect it"
        )
        self.run_id = run_id
        self.missing = missing


class ArtifactCorrupt(StoreError):
    """An artifact's stored bytes do not hash to its digest: they were changed or damaged."""

    def __init__(self, message: str, *, sha256: str) -> None:
        super().__init__(message)
        self.sha256 = sha256


class ClockSkew(TetherError):
    """This machine's clock is too far from the database's for leases: they last a time
    written by one machine's clock and read by another's."""


class NotFound(TetherError, LookupError):
    """No such run, agent or event."""


class Forbidden(TetherError, PermissionError):
    """An identity (an API token's) whose role does not allow the action: a viewer that
    approves, an approver that cancels. Nothing was done, and the refusal is recorded in
    the run's audit log (see :mod:`tether.services.identity`). A run of another tenant is
    never Forbidden: it is NotFound, as an unknown id."""


class Conflict(TetherError):
    """Another writer appended first, or another process holds the run."""


class LeaseLost(Conflict):
    """A newer lease (fencing token) exists for the run: this writer must stop."""


class VersionConflict(Conflict):
    """A compare-and-set on a board found its key at another version than expected
    (someone wrote it first): nothing was written. Read the key again and retry. Catch
    this one (not Conflict) around a board write in an agent: a Conflict may be the run's
    lost lease (LeaseLost), which must stop the agent."""

    def __init__(self, message: str, *, board: str, key: str, expected: int, version: int):
        super().__init__(message)
        self.board = board
        self.key = key
        self.expected = expected
        self.version = version


class QueueFull(TetherError):
    """The queue holds its maximum number of waiting runs: retry later (backpressure)."""


class EncodeError(TetherError, TypeError):
    """A value cannot be stored. The message names the type and the path inside the value."""

    def __init__(self, message: str, *, path: str = "$", type_name: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.type_name = type_name


class InvalidInput(TetherError, ValueError, TypeError):
    """A value passed to tether is not one it takes: the message names the parameter and
    says what is expected. Both a ValueError and a TypeError, so that either ``except``
    catches it; the CLI reports it as a usage error (exit 2). See :mod:`tether.model.inputs`."""


class NondeterminismError(TetherError):
    """Replay found a different step than the one recorded at a position (another kind or
    name, or a tool called with other arguments): the agent's code changed under the run.

    The run stops as ``blocked``, holding no lease and undoing nothing, and this is raised
    (by ``app.run``/``app.resume``; a worker records it and moves on). It goes on once the
    code matches its log again."""

    def __init__(self, run_id: str, position: int, expected: str, found: str) -> None:
        super().__init__(
            f"run {run_id}: nondeterminism at position {position}: the log recorded "
            f"{expected!r} but the agent code now calls {found!r}. The agent code changed "
            f"under a run in flight, so the run is blocked: nothing was undone and no "
            f"worker holds it. Restore the code it started with (or make the agent call "
            f"{expected!r} at position {position} again), then `tether resume {run_id}` "
            f"(`tether retry {run_id}` puts a queued run back in its queue); or fork it "
            f"before position {position}, or cancel it (`tether cancel {run_id}`, "
            f"--compensate to undo its write tools)."
        )
        self.run_id = run_id
        self.position = position
        self.expected = expected
        self.found = found


class StepTimeout(TetherError, TimeoutError):
    """A step attempt ran longer than its retry policy allows.

    ``in_doubt`` is True for a write tool's call: it may have taken effect, or still run
    (a sync call's thread is abandoned, not killed), so it is retried only when that is
    safe (see :mod:`tether.engine.effects`)."""

    def __init__(self, message: str, *, in_doubt: bool = False) -> None:
        super().__init__(message)
        self.in_doubt = in_doubt


class InvalidState(TetherError):
    """The run's status does not allow the operation (e.g. resuming a completed run)."""


class DecisionRefused(InvalidState):
    """An approve/deny/resolve that cannot be taken: wrong approver, second decision, or
    a run not waiting for it. The refusal is recorded in the run's audit log."""


class RevertRefused(InvalidState):
    """A revert of one effect (``app.revert``) that cannot be done: not a completed write
    call, no compensation, already reverted or compensated, a fork's copied call, a run
    executing elsewhere, or an undo in doubt to settle first. Nothing was written."""


class ApprovalDenied(TetherError):
    """Raised inside the agent by ``run.approve`` when the request was denied or timed out."""

    def __init__(
        self, run_id: str, name: str, by: str | None, reason: str | None, timed_out: bool = False
    ) -> None:
        how = "timed out" if timed_out else f"was denied by {by}"
        super().__init__(
            f"run {run_id}: approval {name!r} {how}" + (f": {reason}" if reason else "")
        )
        self.run_id = run_id
        self.name = name
        self.by = by
        self.reason = reason
        self.timed_out = timed_out


class ContractViolation(TetherError):
    """A tool call broke its contract (docs/contracts.md): its arguments do not fit the
    tool's declared shape, a rule refused them, a human refused the approval a rule asked
    for (``stage`` is ``args`` or ``approval``: the tool was not called), or its result
    does not fit its declared shape (``stage`` ``result``: the call happened and is
    recorded). ``rule`` names the rule that fired (``shape`` for the declared types),
    ``value`` what it judged; the refusal is in the run's log, so a replay raises the same."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        tool: str,
        position: int,
        stage: str,
        rule: str,
        value: Any = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.tool = tool
        self.position = position
        self.stage = stage
        self.rule = rule
        self.value = value


class WaitTimeout(TetherError, TimeoutError):
    """Raised inside the agent when ``run.wait`` ran out of time before its signal came."""


class BudgetExceeded(TetherError):
    """A run reached one of its limits (``tether.Limits(..., on_exceeded="fail")``) before
    its next call: ``limit`` (steps, model_calls, tokens, cost, duration), its ``maximum``
    and what the run ``used``. The run fails; nothing more is called."""

    def __init__(self, run_id: str, limit: str, maximum: Any, used: Any, where: str) -> None:
        super().__init__(
            f"run {run_id}: budget exceeded: {limit} reached ({used} of at most {maximum}) "
            f"before {where}; nothing more was called. Give the run larger Limits, or "
            f"on_exceeded='wait' to let a human raise them (tether budget RUN --add ...)"
        )
        self.run_id = run_id
        self.limit = limit
        self.maximum = maximum
        self.used = used


class WorkspaceError(TetherError):
    """A run's workspace cannot be checkpointed or restored: a path a manifest names
    escapes the workspace (a tampered log), its bytes are missing, or a file cannot be
    read or written. The message names the run, the path and what to do."""


class WorkspaceLimit(WorkspaceError):
    """A workspace is over one of its limits (``limit``: max_file_size, max_total_size
    or max_files), checked when a checkpoint is taken; nothing of it was committed."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


_CHILD_SAID = 400  # characters of a child's failure message a parent's error repeats


class ChildFailed(TetherError):
    """Raised inside a parent by ``run.join`` when a child run failed or was cancelled:
    ``child_id`` names the child, ``error`` is its failure context (type, message, step,
    position). Recorded in the parent's log, so a replay raises the same."""

    def __init__(self, run_id: str, child_id: str, error: dict[str, Any]) -> None:
        where = f" in step {error.get('step')!r}" if error.get("step") is not None else ""
        said = str(error.get("message")).rstrip(".")
        if len(said) > _CHILD_SAID:  # a grandchild's failure, and its own: the first words
            said = said[:_CHILD_SAID] + "…"  # (whole, each level's record grew with depth)
        super().__init__(
            f"run {run_id}: child run {child_id} {error.get('status', 'failed')}{where}: "
            f"{error.get('type')}: {said}. See `tether show {child_id}`."
        )
        self.run_id = run_id
        self.child_id = child_id
        self.error = error


class RunFailed(TetherError):
    """``app.run``/``app.resume`` ended with the run failed; ``.run_id`` and ``.error`` say why."""

    def __init__(self, run_id: str, error: dict[str, Any]) -> None:
        where = f" in step {error.get('step')!r} (position {error.get('position')})"
        if error.get("step") is None:
            where = ""
        super().__init__(
            f"run {run_id} failed{where}: {error.get('type')}: "
            f"{str(error.get('message')).rstrip('.')}. See `tether show {run_id}`."
        )
        self.run_id = run_id
        self.error = error
