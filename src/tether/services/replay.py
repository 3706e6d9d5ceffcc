"""Replay testing and the pre-deploy check: a run's log against an agent's current code.

A :class:`Replayer` holds what the agent's ``run`` object is made with (an App's agents,
retry, policy: ``App._replayer()``, or one agent alone) and returns the
:class:`~tether.engine.dry.ReplayReport` of a dry replay (:mod:`tether.engine.dry`) of a
run in a store (:meth:`Replayer.stored`), of a ``tether export`` file read into a
throwaway database (:meth:`Replayer.file`), or of many runs (:meth:`Replayer.check`,
``tether check``): nothing executes, nothing is written. ``tether.testing.replay`` is
the front door; :func:`regression_test` writes the file of ``export --as-test``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.engine.deps import Deps
from tether.engine.dry import FAILS, Config, ReplayReport, dry_replay
from tether.engine.journal import error_info
from tether.engine.registry import AgentDef, Registry
from tether.engine.states import States
from tether.errors import InvalidInput, TetherError
from tether.model.clock import Clock, SystemClock
from tether.model.status import RunStatus
from tether.services import export
from tether.store import RunFilter, RunRecord, Store

UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.BLOCKED)
_NEVER = 2**62  # snapshot_every: a replay's loads never cache a snapshot (no write)


@dataclass(frozen=True, slots=True)
class Replayer:
    """Replays runs with ``agent`` (else the agent of each run, found in ``registry``),
    its ``run`` object made with ``config``."""

    clock: Clock = field(default_factory=SystemClock)
    registry: Registry | None = None
    agent: AgentDef | None = None
    config: Config = field(default_factory=Config)

    def stored(
        self, store: Store, run_id: str, replace: Mapping[int, Any] | None = None
    ) -> ReplayReport:
        """The replay of run ``run_id`` of ``store``, read only; ``replace``: positions ->
        results that replace the recorded ones (a what-if), or answer unrecorded ones."""
        states = States(store, self.clock, _NEVER)
        return self._report(store, states, run_id, check_replace(replace))

    def file(self, path: Path, replace: Mapping[int, Any] | None = None) -> ReplayReport:
        """The replay of the run of the export file ``path`` (see :meth:`stored`)."""
        replace = check_replace(replace)
        with _imported(path, self.clock) as (store, run_id):
            return self.stored(store, run_id, replace)

    def check(
        self, store: Store, runs: Iterable[str] | None = None, statuses: Iterable[str] = UNFINISHED
    ) -> Iterator[ReplayReport]:
        """The report of each run named (else of every run in ``statuses``, unfinished by
        default, oldest first), read only. A run whose agent cannot be found, or whose log
        cannot be read, is reported as ``fails`` with the error."""
        if runs is None:
            records = [r for s in statuses for r in _all(store, str(s))]
            records.sort(key=lambda r: (r.created_at, r.id))
            runs = [r.id for r in records]
        states = States(store, self.clock, _NEVER)
        for run_id in runs:
            try:
                yield self._report(store, states, run_id, {})
            except TetherError as e:
                error = error_info(e, self.clock.now())
                agent, status = _row(store, run_id)
                yield ReplayReport(run_id, agent, status, FAILS, error=error)

    def _report(
        self, store: Store, states: States, run_id: str, replace: dict[int, Any]
    ) -> ReplayReport:
        state = states.load(run_id)
        agent = self.agent
        if agent is None:
            assert self.registry is not None
            # registered (no second read), at the run's version
            agent = self.registry.registered(state.agent or "", state.version, run_id)
            if agent is None:
                agent = self.registry.agent_for(store.get_run(run_id))
        resolve = None if self.registry is None else self.registry.resolve
        return dry_replay(
            agent, store, self.clock, state, replace=replace, config=self.config, resolve=resolve
        )


def _row(store: Store, run_id: str) -> tuple[str, str]:
    """A run's agent and status as its row says, or ``?``."""
    try:
        r = store.get_run(run_id)
    except TetherError:
        return "?", "?"
    return r.agent, str(r.status)


def _all(store: Store, status: str) -> Iterator[RunRecord]:
    """Every run of ``status``, a page of 1,000 at a time (keyset paging)."""
    after: tuple[float, str] | None = None
    while True:
        page = store.page_runs(RunFilter(status=status), limit=1000, after=after)
        yield from page
        if len(page) < 1000:
            return
        after = (page[-1].created_at, page[-1].id)


def check_replace(replace: Mapping[int, Any] | None) -> dict[int, Any]:
    """``replace`` as a dict, checked: positions (int >= 1) to results."""
    if replace is None:
        return {}
    if not isinstance(replace, Mapping):
        raise InvalidInput(f"replace is a mapping of positions to results, not {replace!r}")
    bad = [p for p in replace if type(p) is not int or p < 1]
    if bad:
        raise InvalidInput(f"replace: positions are integers from 1, not {bad[0]!r}")
    return dict(replace)


@contextmanager
def _imported(path: Path, clock: Clock) -> Iterator[tuple[Store, str]]:
    """The run of the export file ``path``, in a throwaway SQLite database."""
    from tether.store.sqlite import SQLiteStore

    try:
        f = path.open(encoding="utf-8")
    except OSError as e:
        raise InvalidInput(f"replay: cannot read {path}: {e.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="tether-replay-") as tmp, f:
        store = SQLiteStore(os.path.join(tmp, "replay.db"))
        try:
            deps = Deps(store, clock, "replay")
            run_id = export.import_run(deps, States(store, clock, _NEVER), f, source=str(path))
            yield store, run_id
        finally:
            store.close()


_TEST = '''"""Regression test of run {run_id} (agent {agent!r}, {status} when exported), written
by `tether export {run_id} --as-test`.

It replays the run's log (LOG, below) against the agent's current code with
tether.testing.replay: no model, tool or network is called and no database is written.
It passes when the code would finish the run or go on with it, and fails when a resume
would block it (the code no longer matches its log) or fail it (the agent raises).
"""

import importlib
from pathlib import Path

from tether.testing import replay

AGENT = ({module!r}, {qualname!r})  # where the agent's code is imported from
LOG = [  # the run as `tether export` writes it (format tether-run {version})
{lines}
]


def _agent():
    found = importlib.import_module(AGENT[0])
    for name in AGENT[1].split("."):
        found = getattr(found, name)
    return found


def test_{name}_replays(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(line + "\\n" for line in LOG), encoding="utf-8")
    report = replay(_agent(), path)
    assert report.ok, str(report)
'''


def regression_test(store: Store, run_id: str) -> str:
    """The text of a pytest file that replays run ``run_id`` (embedded, as exported) with
    its agent's current code (imported from where the run recorded it) and asserts that
    it would finish or go on: ``tether export RUN --as-test PATH``."""
    record = store.get_run(run_id)
    module, qualname = record.code.get("module"), record.code.get("qualname")
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise InvalidInput(
            f"run {run_id}: its agent {record.agent!r} recorded no code a test can import "
            f"({module}.{qualname}); define the agent at the top level of a module"
        )
    if module == "__main__":
        raise InvalidInput(
            f"run {run_id}: its agent {record.agent!r} was defined in a script (__main__), "
            f"which a test cannot import; move it into a module"
        )
    lines = "\n".join(f"    {line!r}," for line in export.export_lines(store, run_id))
    name = "run_" + "".join(c if c.isalnum() else "_" for c in run_id)
    return _TEST.format(
        run_id=run_id,
        agent=record.agent,
        status=record.status,
        module=module,
        qualname=qualname,
        version=export.FORMAT_VERSION,
        lines=lines,
        name=name,
    )
