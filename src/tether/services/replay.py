"""Replay testing and the pre-deploy check: a run's log against an agent's current code.

:func:`replay` (``tether.testing.replay``) takes an App or an agent and a run (an id in
the App's database, or a ``tether export`` file) and returns the
:class:`~tether.engine.dry.ReplayReport` of a dry replay (:mod:`tether.engine.dry`):
nothing executes, nothing is written. :func:`check` replays many runs of one App for
``tether check``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.engine.dry import FAILS, Config, ReplayReport, dry_replay
from tether.engine.journal import error_info
from tether.engine.registry import AgentDef, Registry
from tether.engine.states import States
from tether.errors import InvalidInput, TetherError
from tether.model.status import RunStatus
from tether.store import RunFilter, RunRecord, Store

if TYPE_CHECKING:
    from tether.app import App

UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.BLOCKED)
_NEVER = 2**62  # snapshot_every: a replay's loads never cache a snapshot (no write)


def replay(
    app_or_agent: App | Callable[..., Any],
    run: str | os.PathLike[str],
    *,
    replace: Mapping[int, Any] | None = None,
) -> ReplayReport:
    """What the current code of ``app_or_agent`` would do with ``run``, from its log
    alone: executing nothing, writing nothing (see :mod:`tether.engine.dry`).

    ``run`` is the id of a run in the App's database, or the path of a ``tether export``
    file (read into a throwaway database; then an agent function will do, no App needed).
    ``replace`` maps positions to results that replace what the log recorded there, or
    answer a position it has no record of (a what-if: another model output at N).
    """
    replace = _check_replace(replace)
    app, agent = _split(app_or_agent)
    if isinstance(run, os.PathLike) or (isinstance(run, str) and _is_file(run)):
        with _imported(Path(run)) as (store, run_id):
            return _replay_one(app, agent, store, run_id, replace)
    if app is None:
        raise InvalidInput(
            f"replay: {run!r} is not an export file, and a run id needs the App whose "
            f"database holds it: pass the App, or `tether export` the run to a file"
        )
    return _replay_one(app, agent, app.store, run, replace)


def check(
    app: App,
    runs: Iterable[str] | None = None,
    statuses: Iterable[str] = UNFINISHED,
    *,
    store: Store | None = None,
) -> Iterator[ReplayReport]:
    """The replay report of each run named (else of every run in ``statuses``, unfinished
    by default, oldest first) against ``app``'s current code, read from ``store`` (a
    read-only one, else the App's); never writes. A run whose agent cannot be found, or
    whose log cannot be read, is reported as ``fails`` with the error."""
    store = store if store is not None else app.store
    if runs is None:
        records = [r for s in statuses for r in _all(store, str(s))]
        records.sort(key=lambda r: (r.created_at, r.id))
        runs = [r.id for r in records]
    states = States(store, app.clock, _NEVER)
    for run_id in runs:
        try:
            yield _report(app, None, store, states, run_id, {})
        except TetherError as e:
            error = error_info(e, app.clock.now())
            yield ReplayReport(run_id, "?", "?", FAILS, error=error)


def _all(store: Store, status: str) -> Iterator[RunRecord]:
    """Every run of ``status``, a page of 1,000 at a time (keyset paging)."""
    after: tuple[float, str] | None = None
    while True:
        page = store.page_runs(RunFilter(status=status), limit=1000, after=after)
        yield from page
        if len(page) < 1000:
            return
        after = (page[-1].created_at, page[-1].id)


def _replay_one(
    app: App | None, agent: AgentDef | None, store: Store, run_id: str, replace: dict[int, Any]
) -> ReplayReport:
    clock = app.clock if app is not None else _clock()
    return _report(app, agent, store, States(store, clock, _NEVER), run_id, replace)


def _report(
    app: App | None,
    agent: AgentDef | None,
    store: Store,
    states: States,
    run_id: str,
    replace: dict[int, Any],
) -> ReplayReport:
    state = states.load(run_id)
    if agent is None:
        assert app is not None
        registry: Registry = app._registry
        agent = registry.agents.get(state.agent or "")  # registered: no second read
        if agent is None:
            agent = registry.agent_for(store.get_run(run_id))
    return dry_replay(agent, store, states.clock, state, replace=replace, config=_config(app))


def _config(app: App | None) -> Config:
    if app is None:
        return Config()
    e = app._executor
    return Config(e.retry, e.policy, e.inline_sleep_max, frozenset(e.approver_groups))


def _split(app_or_agent: Any) -> tuple[App | None, AgentDef | None]:
    from tether.app import App

    if isinstance(app_or_agent, App):
        return app_or_agent, None
    d = getattr(app_or_agent, "__tether_agent__", None)
    if isinstance(d, AgentDef):
        return None, d
    raise InvalidInput(
        f"replay takes an App or an agent (a function decorated with @app.agent or "
        f"@tether.agent), not {app_or_agent!r}"
    )


def _check_replace(replace: Mapping[int, Any] | None) -> dict[int, Any]:
    if replace is None:
        return {}
    if not isinstance(replace, Mapping):
        raise InvalidInput(f"replace is a mapping of positions to results, not {replace!r}")
    bad = [p for p in replace if type(p) is not int or p < 1]
    if bad:
        raise InvalidInput(f"replace: positions are integers from 1, not {bad[0]!r}")
    return dict(replace)


def _is_file(run: str) -> bool:
    return os.sep in run or run.endswith((".jsonl", ".json")) or os.path.isfile(run)


def _clock() -> Any:
    from tether.model.clock import SystemClock

    return SystemClock()


@contextmanager
def _imported(path: Path) -> Iterator[tuple[Store, str]]:
    """The run of the export file ``path``, in a throwaway SQLite database."""
    import tether

    try:
        f = path.open(encoding="utf-8")
    except OSError as e:
        raise InvalidInput(f"replay: cannot read {path}: {e.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="tether-replay-") as tmp, f:
        scratch = tether.open(os.path.join(tmp, "replay.db"))
        try:
            run_id = scratch.import_run(f, source=str(path))
            yield scratch.store, run_id
        finally:
            scratch.close()


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
    from tether.services.export import FORMAT_VERSION, export_lines

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
    lines = "\n".join(f"    {line!r}," for line in export_lines(store, run_id))
    name = "run_" + "".join(c if c.isalnum() else "_" for c in run_id)
    return _TEST.format(
        run_id=run_id,
        agent=record.agent,
        status=record.status,
        module=module,
        qualname=qualname,
        version=FORMAT_VERSION,
        lines=lines,
        name=name,
    )
