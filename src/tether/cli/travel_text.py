"""What ``tether history``, ``state`` and ``diff`` print: a run's log, its state at a
point and the difference of two points, as text or plain data (the cells and the words
come from :mod:`tether.cli.format`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.cli.format import (
    event_summary,
    revert_data,
    short,
    status_line,
    step_status,
    table,
    when,
)
from tether.model.state import RunState
from tether.model.workspace import FileChange
from tether.services.timetravel import Diff, History


def history_text(h: History) -> str:
    """``tether history``: a line about the run, its events, then its steps."""
    lineage = f", forked from {h.run.parent_id} at seq {h.run.fork_seq}" if h.run.parent_id else ""
    out = [
        f"run {h.run.id} ({h.run.agent}, {h.run.status}): {len(h.entries)} events, "
        f"{len(h.steps)} steps{lineage}"
    ]
    rows = [
        [e.seq, when(e.at, date=False), e.type, e.position, event_summary(e.type, dict(e.data))]
        for e in h.entries
    ]
    out.append(table(["SEQ", "TIME", "TYPE", "POS", "SUMMARY"], rows, right="SEQ POS"))
    if h.steps:
        out.append("")
        out.append(
            table(
                ["POS", "KIND", "NAME", "STATUS", "SEQ"],
                [[s.position, s.kind, s.name, step_status(s, h.reverts), s.seq] for s in h.steps],
                right="POS SEQ",
            )
        )
    return "\n".join(out)


def history_data(h: History) -> dict[str, Any]:
    """``history --json``: the run row, the events (decoded) and the steps with their seq."""
    return {
        "run": {
            "id": h.run.id,
            "agent": h.run.agent,
            "status": h.run.status,
            "parent_id": h.run.parent_id,
            "fork_seq": h.run.fork_seq,
        },
        "events": [
            {
                "seq": e.seq,
                "type": e.type,
                "at": e.at,
                "actor": e.actor,
                "position": e.position,
                "name": e.name,
                "data": e.data,
            }
            for e in h.entries
        ],
        "steps": [
            {k: getattr(s, k) for k in ("position", "kind", "name", "status", "seq")}
            for s in h.steps
        ],
        "reverts": [revert_data(r) for r in h.reverts],
    }


def state_text(state: RunState) -> str:
    """``tether state``: status, input, output, vars, failure, then the steps."""
    pairs = [
        ("run", state.run_id),
        ("seq", str(state.seq)),
        ("status", status_line(state)),
        ("input", short(state.input)),
        ("output", short(state.output)),
    ]
    pairs += [("var", f"{k} = {short(v)}") for k, v in state.vars.items()]
    if state.failure:
        pairs.append(("failure", f"{state.failure.get('type')}: {state.failure.get('message')}"))
    out = ["\n".join(f"{k:<8} {v}" for k, v in pairs)]
    if state.steps:
        rows = [
            [s.position, s.kind, s.name, step_status(s, state.reverts), s.seq, short(s.output, 60)]
            for s in state.steps
        ]
        out += [
            "",
            table(["POS", "KIND", "NAME", "STATUS", "SEQ", "OUTPUT"], rows, right="POS SEQ"),
        ]
    return "\n".join(out)


def render_diff(d: Diff) -> str:
    """The diff for people: one line per change, ``~`` changed, ``+`` added, ``-`` removed."""
    counts = ", ".join(f"{len(d.of(k))} {k}" for k in ("changed", "added", "removed"))
    lines = [f"--- {d.a}", f"+++ {d.b}", "same state" if not d else counts]
    for c in d.changes:
        if c.kind == "changed":
            lines.append(f"~ {c.where}: {short(c.old, 60)} -> {short(c.new, 60)}")
        else:
            sign, value = ("+", c.new) if c.kind == "added" else ("-", c.old)
            lines.append(f"{sign} {c.where}: {short(value, 100)}")
    return "\n".join(lines)


def render_files_diff(changes: Sequence[FileChange]) -> str:
    """Workspace files for people: ``+`` added, ``-`` removed, ``~`` modified, with sizes."""
    if not changes:
        return "no file differs"
    marks = {"added": "+", "removed": "-", "modified": "~"}
    lines = []
    for c in changes:
        sizes = {
            "added": f"{c.size_after} bytes",
            "removed": f"{c.size_before} bytes",
            "modified": f"{c.size_before} -> {c.size_after} bytes",
        }[c.change]
        lines.append(f"{marks[c.change]} {c.path}  ({sizes})")
    n = len(changes)
    return "\n".join([*lines, f"{n} file{'s' if n != 1 else ''} changed"])
