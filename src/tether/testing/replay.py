"""``tether.testing.replay``: an agent's current code against a recorded run (see
:mod:`tether.engine.dry` and docs/testing.md, "Replay testing")."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace as replace_
from pathlib import Path
from typing import Any

from tether.app import App
from tether.engine.dry import ReplayReport
from tether.engine.registry import AgentDef
from tether.errors import InvalidInput
from tether.services.replay import Replayer


def replay(
    app_or_agent: App | Callable[..., Any],
    run: str | os.PathLike[str],
    *,
    replace: Mapping[int, Any] | None = None,
    app: App | None = None,
) -> ReplayReport:
    """What the current code of ``app_or_agent`` would do with ``run``, from its log
    alone: executing nothing, writing nothing (see :class:`ReplayReport`).

    ``run`` is the id of a run in the App's database, or the path of a ``tether export``
    file (read into a throwaway database: then an agent function will do, no App needed).
    ``replace`` maps positions to results that replace what the log recorded there, or
    answer a position it has no record of (a what-if: another model output at N).
    ``app``: with an agent, the App whose database holds the run ``run`` names.
    """
    if isinstance(app_or_agent, App):
        replayer, app = app_or_agent._replayer(), app_or_agent
    else:
        d = getattr(app_or_agent, "__tether_agent__", None)
        if not isinstance(d, AgentDef):
            raise InvalidInput(
                f"replay takes an App or an agent (a function decorated with @app.agent or "
                f"@tether.agent), not {app_or_agent!r}"
            )
        replayer = Replayer(agent=d) if app is None else replace_(app._replayer(), agent=d)
    if isinstance(run, os.PathLike) or _is_file(run):
        return replayer.file(Path(run), replace)
    if app is None:
        raise InvalidInput(
            f"replay: {run!r} is not an export file, and a run id needs the App whose "
            f"database holds it: pass the App (or app=), or `tether export` the run to a file"
        )
    return replayer.stored(app.store, run, replace)


def _is_file(run: str) -> bool:
    return os.sep in run or run.endswith((".jsonl", ".json")) or os.path.isfile(run)
