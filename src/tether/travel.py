"""Time travel, export and retention (a mixin of :class:`tether.App`): a run's history,
its state at any point, diffs, forks, export and import, and ``gc`` (see
:mod:`tether.services.timetravel`, :mod:`tether.services.export`,
:mod:`tether.services.retention`)."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from typing import Any, TextIO

from tether.engine.deps import Deps
from tether.engine.dry import Config
from tether.engine.executor import Executor
from tether.engine.registry import Registry
from tether.engine.states import States
from tether.errors import InvalidInput
from tether.model import inputs
from tether.model.clock import Clock
from tether.model.durations import Duration
from tether.model.state import RunState
from tether.model.workspace import Entry, FileChange
from tether.services import export, replay, retention, timetravel, workspaces
from tether.store import Store


class TimeTravel:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    store: Store
    clock: Clock
    _deps: Deps
    _states: States
    _executor: Executor
    _registry: Registry

    def _replayer(self) -> replay.Replayer:
        """Replays runs with this App's agents, retry, policy and approver groups (for
        ``tether.testing.replay`` and ``tether check``: see :mod:`tether.services.replay`)."""
        e = self._executor
        groups = frozenset(e.approver_groups)
        default = e.workspaces.default if e.workspaces is not None else None
        config = Config(e.retry, e.policy, e.inline_sleep_max, groups, default)
        return replay.Replayer(self.clock, self._registry, None, config)

    def history(self, run_id: str) -> timetravel.History:
        """The run's row, every event with its seq, and its steps."""
        return timetravel.history(self.store, inputs.lookup_id(run_id))

    def state(
        self,
        run_id: str,
        *,
        at: int | None = None,
        step: int | str | None = None,
        when: timetravel.When = "after",
    ) -> RunState:
        """The exact state at seq ``at``, or before/after ``step`` (a position or a name);
        the head when neither is given."""
        return timetravel.state_at(
            self._states, inputs.lookup_id(run_id), at=at, step=step, when=when
        )

    def diff(
        self, a: RunState | str, b: RunState | str, *, bookkeeping: bool = False
    ) -> timetravel.Diff:
        """What differs from state ``a`` to state ``b`` (a run id means its head)."""
        return timetravel.compare(self._states, a, b, bookkeeping=bookkeeping)

    def fork(
        self,
        run_id: str,
        *,
        step: int | str | None = None,
        at: int | None = None,
        when: timetravel.When = "after",
        input: dict[str, Any] | None = None,
        vars: dict[str, Any] | None = None,
        workspace: str | os.PathLike[str] | None = None,
    ) -> str:
        """A new queued run branching off ``run_id`` after ``step`` (or at seq ``at``, or at
        its head), with new ``input`` and edited task ``vars``; ``resume`` executes it.
        ``workspace``: a new (or empty) directory that gets the run's files at the fork
        point, and in which the fork works (docs/workspace.md)."""
        run_id = inputs.lookup_id(run_id)
        if workspace is None:
            self._shared_workspace(run_id)
        root = workspaces.check_directory(workspace) if workspace is not None else None
        new_id = timetravel.fork(
            self._deps,
            self._states,
            run_id,
            at=at,
            step=step,
            when=when,
            input=input,
            vars=vars,
            workspace=root,
        )
        if root is not None:
            seq = self.store.get_run(new_id).fork_seq or 0
            blobs = self._workspace_blobs()  # type: ignore[attr-defined]
            workspaces.materialise(self.store, blobs, new_id, seq, root, None)
        return new_id

    def _shared_workspace(self, run_id: str) -> None:
        """Refuse a fork without a directory of its own when its resume would restore the
        parent's directory: the run has files and its agent's directory is not per run."""
        agent = self._registry.agents.get(self.store.get_run(run_id).agent)
        cfg = (agent.workspace if agent else None) or self.workspace  # type: ignore[attr-defined]
        if (cfg is None or "{run_id}" not in cfg.path) and workspaces.manifest_at(
            self.store, run_id
        ):
            raise InvalidInput(
                f"run {run_id} has workspace files and its agent's directory is not one per "
                f"run ({{run_id}} in its path): the fork would work in (and restore) the "
                f"same directory. Give it one: workspace=DIR (tether fork --workspace DIR)"
            )

    def workspace_files(self, run_id: str, *, at: int | None = None) -> dict[str, Entry]:
        """The files of the run's workspace after seq ``at`` (its head when None): path ->
        Entry (sha256, mode, size), from its log."""
        return workspaces.manifest_at(self.store, inputs.lookup_id(run_id), at)

    def workspace_diff(self, a: RunState | str, b: RunState | str) -> list[FileChange]:
        """The workspace files added, removed or modified from point ``a`` to ``b`` (a
        state from :meth:`state`, or a run id: its head)."""
        return workspaces.files_diff(self.store, self._point(a), self._point(b))

    def _point(self, p: RunState | str) -> tuple[str, int | None]:
        return (p.run_id, p.seq) if isinstance(p, RunState) else (inputs.lookup_id(p), None)

    def export_run(self, run_id: str, out: TextIO) -> int:
        """Write the run to ``out`` as ``tether-run`` JSON lines; return how many events."""
        return export.export_run(self.store, inputs.lookup_id(run_id), out)

    def import_run(
        self,
        lines: Iterable[str],
        *,
        new_id: bool = False,
        source: str = "<input>",
        secret_env: Collection[str] = (),
    ) -> str:
        """Create a run from an export; a Secret.env in it needs its var in ``secret_env``."""
        options: dict[str, Any] = {"new_id": new_id, "source": source, "secret_env": secret_env}
        return export.import_run(self._deps, self._states, lines, **options)

    def gc(
        self,
        *,
        older_than: Duration | None = None,
        status: Sequence[str] = (),
        keep_last: int | None = None,
        dry_run: bool = False,
        vacuum: bool = True,
        blob_grace: Duration = retention.BLOB_GRACE,
    ) -> retention.GcResult:
        """Delete finished runs by age (seconds, a timedelta or ``"30d"``), status and
        keep-last-N per agent, sweep the snapshot pages no snapshot references and nothing
        wrote for ``blob_grace``, then give the space back. See :mod:`tether.services.retention`."""
        return retention.collect(
            self.store,
            self.clock,
            older_than=older_than,
            status=status,
            keep_last=keep_last,
            dry_run=dry_run,
            vacuum=vacuum,
            blob_grace=blob_grace,
        )
