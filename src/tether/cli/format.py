"""What the ``tether`` command prints, as text or plain data.

The command modules choose what to show and call these; none of them prints, opens a
database or reads a flag. Tables (:func:`table`), times (:func:`when`) and durations
(:func:`ms`), statuses (:func:`status_line`, :func:`shown_status`), values cut to a
width (:func:`short`), JSON output (:func:`plain`, :func:`json_text`,
:func:`codec_json_text`) and the one-line error (:func:`error_line`). The text of time
travel (``history``, ``state``, ``diff``) is in :mod:`tether.cli.travel_text`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tether
from tether.model import codec, verdicts
from tether.model import events as ev
from tether.model.clock import owner_is_dead_local
from tether.model.events import Event
from tether.model.state import RunState
from tether.model.status import FINISHED, RunStatus
from tether.model.steps import StepState
from tether.services import budgets
from tether.store import RunRecord

WIDTH = 100  # longest value shown in one table cell or field


# -- primitives ---------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: str = "") -> str:
    """Rows as aligned columns; the columns whose header is in ``right`` align right."""
    cells = [list(headers), *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            c.rjust(w) if h in right.split() else c.ljust(w)
            for c, w, h in zip(row, widths, headers, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join(line(r) for r in cells)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def fields(pairs: Sequence[tuple[str, str]]) -> str:
    """``name  value`` lines, the names in a column of 10."""
    return "\n".join(f"{k:<10} {v}" for k, v in pairs)


def when(at: float | None, *, date: bool = True) -> str:
    """A timestamp in local time (``date=False``: time of day with milliseconds)."""
    if at is None:
        return "-"
    try:
        if not date:
            return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a damaged row)
        return f"{at!r} (not a time)"


def ms(seconds: float | None) -> int | None:
    """A duration in whole milliseconds (None stays None)."""
    return None if seconds is None else round(seconds * 1000)


def money(cost: float | None) -> str:
    """``$0.0123``, or ``-`` when unknown."""
    return "-" if cost is None else f"${cost:.4f}"


def plural(n: int, noun: str) -> str:
    """``1 execution``, ``2 executions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def short(value: Any, width: int = WIDTH) -> str:
    """``value`` as compact JSON, cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(plain(value), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (for --json): tuples and sets as lists, the rest as str."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def json_text(value: Any) -> str:
    """``value`` as indented plain JSON (``--json`` of runs, show, workers…)."""
    return json.dumps(plain(value), ensure_ascii=False, indent=2)


def codec_json_text(value: Any) -> str:
    """``value`` as indented JSON with the codec's tags kept (tuples, sets, bytes… stay
    recognisable): the ``--json`` of the time-travel commands."""
    return json.dumps(codec.to_json_value(value), ensure_ascii=False, indent=2)


def error_line(message: str) -> str:
    """``tether: error: …`` on one line, whatever whitespace ``message`` holds."""
    return f"tether: error: {' '.join(message.split())}"


# -- statuses -----------------------------------------------------------------------


def stalled(record: RunRecord, now: float | None = None) -> bool:
    """True when the run's row says running but no live process holds its lease."""
    if record.status != RunStatus.RUNNING:
        return False
    if record.lease_owner is None or record.lease_expires is None:
        return True
    now = time.time() if now is None else now
    return record.lease_expires < now or owner_is_dead_local(record.lease_owner)


def shown_status(record: RunRecord, state: RunState) -> str:
    """The status, ``running (stalled)`` when no live process holds a running run."""
    if state.status == RunStatus.RUNNING and stalled(record):
        return "running (stalled)"
    return state.status


def status_line(state: RunState) -> str:
    """``completed, 8 of 8 committed`` or ``failed, step 3 of 8, 1–2 committed``."""
    position = state.describe_position()
    return position if position.startswith(state.status) else f"{state.status}, {position}"


def positions(items: Sequence[tuple[int, str]]) -> str:
    """``1 fetch, 2 plan``, or ``nothing``."""
    return ", ".join(f"{pos} {name}" for pos, name in items) or "nothing"


def handle_report(state: RunState, handle: tether.RunHandle) -> str:
    """What an execution reused and ran, and how the run ended (``state``: after it)."""
    lines = [
        f"run {handle.id}: {status_line(state)}",
        f"reused from the journal (not executed again): {positions(handle.reused)}",
        f"executed now: {positions(handle.executed)}",
    ]
    waiting = getattr(handle, "waiting", None)  # what a waiting run waits for, if anything
    if waiting:
        lines.append(f"waiting for: {short(waiting)}")
    lines.append(f"output: {short(handle.output)}")
    return "\n".join(lines)


# -- runs and show ------------------------------------------------------------------


def runs_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``tether runs``: the rows of :func:`run_summary`."""
    return table(
        ["ID", "AGENT", "STATUS", "POSITION", "UPDATED"],
        [
            [
                r["id"],
                r["agent"] + (f"@{r['version']}" if r.get("version") else ""),  # as in traces
                r["status"] + (" (stalled)" * r["stalled"]) + _why(r),
                r["position"],
                when(r["updated_at"]),
            ]
            for r in rows
        ],
    )


def _why(r: Mapping[str, Any]) -> str:  # waiting on, or failed by, its budget
    spent = r.get("waiting") == "budget" or "budget exceeded" in (r.get("reason") or "")[:15]
    return " (budget)" if spent and r["status"] in ("waiting", "failed") else ""


def costs_table(by: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """``tether costs``: one row per agent or session (``-``: runs outside a session)."""
    heads = [by.upper(), "RUNS", "CALLS", "IN", "OUT", "COST"]
    cells = ["key", "runs", "calls", "input_tokens", "output_tokens"]
    body = [[*(r[c] if r[c] is not None else "-" for c in cells), money(r["cost"])] for r in rows]
    return table(heads, body, right="RUNS CALLS IN OUT COST")


def run_summary(record: RunRecord, state: RunState, expected: int | None = None) -> dict[str, Any]:
    """One run as plain data: identity, status, position."""
    return {
        "id": record.id,
        "agent": record.agent,
        "version": record.version,
        "status": state.status,
        "stalled": stalled(record),
        "waiting": state.waiting.get("kind") if state.waiting else None,
        "reason": budgets.describe(state) if state.budget else None,
        "position": state.describe_position(expected),
        "committed": state.committed,
        "steps": len(state.steps),
        "created_at": state.created_at,
        "updated_at": state.updated_at,
    }


def damaged_summary(record: RunRecord) -> dict[str, Any]:
    """:func:`run_summary` of a run whose log is damaged: what its row says."""
    return {
        "id": record.id,
        "agent": record.agent,
        "version": record.version,
        "status": "damaged",
        "stalled": False,
        "position": f"log damaged: tether show {record.id}",
        "committed": None,
        "steps": None,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def run_details(record: RunRecord, state: RunState) -> dict[str, Any]:
    """Everything ``show --json`` prints."""
    u = state.usage
    return {
        **run_summary(record, state),
        "input": state.input,
        "output": state.output,
        "failure": state.failure,
        "blocked": state.blocked,
        "budget": state.budget,
        "vars": state.vars,
        "executions": state.executions,
        "usage": {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cost": u.cost,
            "calls": u.calls,
        },
        "steps": [_step_data(s) for s in state.steps],
        "reverts": [revert_data(r) for r in state.reverts],
    }


def _step_data(s: StepState) -> dict[str, Any]:
    usage = s.usage
    return {
        "position": s.position,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "attempts": s.attempts,
        "duration_ms": ms(s.duration),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "cost": usage.cost if usage else None,
        "output": s.output,
        "why": s.why,
        "errors": [{k: e.get(k) for k in ("type", "message", "at")} for e in s.errors],
        "contract": verdicts.contract_of(s),
    }


def revert_data(r: StepState) -> dict[str, Any]:  # who reverted the call at position, why
    mine = {k: getattr(r, k) for k in ("position", "status", "key", "attempts", "started_at")}
    return mine | {k: (r.detail or {}).get(k) for k in ("by", "reason")}


def _agent(record: RunRecord) -> str:
    return record.agent + (f" (version {record.version})" if record.version else "")


def damaged_text(record: RunRecord, damage: str) -> str:
    """``tether show`` of a run whose log is damaged (``damage``: the error's message)."""
    return fields(
        [
            ("run", record.id),
            ("agent", _agent(record)),
            ("status", f"damaged (its row says {record.status})"),
            ("damage", damage.split(": ", 1)[1]),
        ]
    )


def header_text(record: RunRecord, state: RunState, expected: int | None = None) -> str:
    """The fields at the top of ``tether show``."""
    u = state.usage
    out = [
        ("run", record.id),
        ("agent", _agent(record)),
        ("status", shown_status(record, state)),
        ("position", state.describe_position(expected)),
        ("created", when(state.created_at)),
        ("updated", f"{when(state.updated_at)} ({plural(state.executions, 'execution')})"),
        ("input", short(state.input)),
        (
            "usage",
            f"{plural(u.calls, 'model call')}, {u.input_tokens} tokens in, "
            f"{u.output_tokens} out, {money(u.cost)}",
        ),
    ]
    if state.status == RunStatus.COMPLETED:
        out.insert(7, ("output", short(state.output)))
    out[3:3] = _where_fields(record)
    if stalled(record):
        out.append(("note", f"no live process holds it: `tether resume {record.id}`"))
    if state.budget:
        out.append(("budget", str(budgets.describe(state))))
    out += [("var", f"{k} = {short(v)}") for k, v in state.vars.items()]
    out += [
        ("decision", f"{d.position} {d.name} = {short(d.output, 40)}; why: {short(d.why)}")
        for d in state.decisions
    ]
    out += [("reverted", revert_line(r, record.id)) for r in state.reverts]
    return fields(out)


def revert_line(r: StepState, run_id: str) -> str:
    """``2 by alice at …, completed: why`` (a revert of RunState.reverts); an unfinished
    one says what finishes it."""
    by, why = (r.detail or {}).get("by"), (r.detail or {}).get("reason")
    text = f"{r.position} by {by} at {when(r.started_at)}, {r.status}" + (f": {why}" if why else "")
    again = f" (`tether revert {run_id} --step {r.position}` finishes it)"
    return text + (again if r.status != "completed" else "")


def _where_fields(record: RunRecord, now: float | None = None) -> list[tuple[str, str]]:
    """Its queue (and when it is due, if later), and who holds its lease, while either
    matters: ``queue  default, due 2026-11-25 14:59:01 (in 22 s)``."""
    now = time.time() if now is None else now
    out = []
    unfinished = record.status not in FINISHED
    if record.queue is not None and unfinished:
        text = record.queue + (f", priority {record.priority}" if record.priority else "")
        due = record.available_at
        if record.status in (RunStatus.QUEUED, RunStatus.WAITING) and due is not None and due > now:
            text += f", due {when(due)} (in {due - now:.0f} s)"
        out.append(("queue", text))
    if record.lease_owner is not None and (record.lease_expires or 0) >= now:
        out.append(("held by", f"{record.lease_owner} (lease until {when(record.lease_expires)})"))
    return out


def blocked_text(b: Mapping[str, Any], record: RunRecord) -> str:
    """Why a run is blocked and what continues it."""
    again = (
        f"`tether retry {record.id}` puts it back in queue {record.queue!r}"
        if record.queue is not None
        else f"`tether resume {record.id}` continues it"
    )
    lines = [
        ("blocked", f"at position {b.get('position')}, since {when(b.get('at'))}"),
        ("", f"the log recorded: {b.get('recorded')}"),
        ("", f"the code now calls: {b.get('found')}"),
        ("", "the agent's code changed under the run; nothing was undone"),
        ("", f"restore or patch the code, then {again}"),
        ("", f"(or `tether fork`, or `tether cancel {record.id}` [--compensate])"),
    ]
    return fields(lines)


def failure_text(f: Any, run_id: str, with_traceback: bool) -> str:
    """A run's failure: type, message, where, when (and its traceback if asked)."""
    where = f"in {f.get('kind') or 'step'} {f.get('step')!r} (position {f.get('position')})"
    lines = [
        ("failure", f"{f.get('type')}: {short(f.get('message', ''))}"),
        ("", f"{where if f.get('step') else 'outside any step'}, at {when(f.get('at'))}"),
    ]
    if f.get("input"):
        lines.append(("", f"input: {short(f['input'])}"))
    text = fields(lines)
    if with_traceback and f.get("traceback"):
        return text + "\n\n" + str(f["traceback"]).rstrip()
    return text + f"\n{'':<10} (the traceback: tether show {run_id} --traceback)"


def step_status(s: StepState, reverts: Sequence[StepState] = ()) -> str:
    """A step's status, with its revert's (tether revert) if any: ``completed, reverted``."""
    r = next((r for r in reverts if r.position == s.position), None)
    done = {"completed": "reverted", "failed": "revert failed"}
    return s.status if r is None else f"{s.status}, {done.get(r.status, 'reverting')}"


def steps_table(steps: Sequence[StepState], reverts: Sequence[StepState] = ()) -> str:
    """``tether show``'s steps: position, kind, name, status, attempts, time, usage."""
    rows = []
    for s in steps:
        u = s.usage
        rows.append(
            [
                s.position,
                s.kind or None,  # a position not recorded yet has no kind nor name
                s.name or None,
                step_status(s, reverts),
                s.attempts,
                ms(s.duration),
                u.input_tokens if u else None,
                u.output_tokens if u else None,
                money(u.cost) if u else None,
            ]
        )
    return table(
        ["POS", "KIND", "NAME", "STATUS", "ATTEMPTS", "MS", "IN", "OUT", "COST"],
        rows,
        right="POS ATTEMPTS MS IN OUT COST",
    )


def contracts_text(steps: Sequence[StepState], in_force: Sequence[Mapping[str, Any]]) -> str:
    """The verdicts on a run's tool calls, and (``--app``) the contracts in force."""
    out = [("judged", line) for line in verdicts.show_lines(steps)]
    for c in in_force:
        rules = [
            verdicts.rule_words({**r, "outcome": f"on breach {r['on_breach']}"}) for r in c["rules"]
        ]
        out.append(("in force", f"{c['tool']}: shape" + "".join(f"; {r}" for r in rules)))
    return fields([(k if i == 0 or out[i - 1][0] != k else "", v) for i, (k, v) in enumerate(out)])


# -- events, history and state --------------------------------------------------------


def event_line(e: Event) -> str:
    """One event as a JSON line (``tether log --json``)."""
    return json.dumps(
        {
            "run_id": e.run_id,
            "seq": e.seq,
            "type": e.type,
            "at": e.at,
            "actor": e.actor,
            "data": json.loads(e.data),
        },
        ensure_ascii=False,
    )


def events_table(events: Iterable[Event]) -> str:
    """``tether log``: seq, time, type and a summary of each event."""
    rows = [
        [e.seq, when(e.at, date=False), e.type, event_summary(e.type, e.payload())] for e in events
    ]
    return table(["SEQ", "TIME", "TYPE", "SUMMARY"], rows, right="SEQ")


def event_summary(type_: str, d: dict[str, Any]) -> str:
    """One event's data in a few words."""
    step = f"{d.get('pos')} {d.get('name')}"
    if type_ == "run.created":
        h = d.get("handoff") or {}
        by = f", handed by {h.get('from')} at {h.get('pos')}" if h else ""
        text = f"agent {d.get('agent')}{by}, input {short(d.get('input'), 60)}"
    elif type_ == "run.started":
        text = f"by {d.get('by')}, epoch {d.get('epoch')}" + (" (retry)" * bool(d.get("retry")))
    elif type_ == "run.completed":
        text = short(d.get("output"))
    elif type_ == "run.suspended":
        text = f"{d.get('reason')}; {d.get('status', 'running')}"
        text += f" in {d['queue']!r}" if d.get("queue") else ""
    elif type_ == "run.cancelled":
        text = f"by {d.get('by') or '-'}: {d.get('reason')}"
        failures = d.get("compensation_failures")
        text += f"; {len(failures)} undo(s) failed" if failures else ""
    elif type_ == "run.blocked":
        text = f"position {d.get('position')}: recorded {d.get('recorded')}, found {d.get('found')}"
    elif type_ == "run.failed":
        err = d.get("error", {})
        text = f"{err.get('type')}: {err.get('message')} (position {err.get('position')})"
    elif type_ == "step.completed":
        text = (
            f"{step} ({d.get('kind')}), attempt {d.get('attempt')}, "
            f"{ms(d.get('duration'))} ms -> {short(d.get('output'), 50)}"
        )
    elif type_ == "step.failed":
        retry = "will retry" if d.get("retry_at") is not None else "no retry left"
        err = d.get("error", {})
        text = f"{step} attempt {d.get('attempt')}: {err.get('type')}: {err.get('message')}"
        text += f"; {retry}"
    elif type_ == "tool.intent" and d.get("kind") == "revert":
        text = f"revert of {step} by {d.get('by')}, key {d.get('key')}"
    elif type_ == "decision":
        text = f"{step} = {short(d.get('choice'), 40)}; why: {d.get('why')}"
    elif type_ in (ev.TOOL_PROPOSED, ev.TOOL_VERDICT):
        text = verdicts.event_words(type_, d)
    elif type_ in ("var.set", "var.deleted"):
        text = f"{step} = {short(d.get('value'), 60)}" if type_ == "var.set" else step
    elif type_ == "workspace":
        text = f"{len(d.get('files') or [])} file(s) written, {len(d.get('removed') or [])} removed"
    else:
        text = short(d)
    return short(text, 80)


# -- workers ------------------------------------------------------------------------


def tokens_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``tether token list``: name, role, tenant (``*``: every one), id, created, state."""
    lines = [f"{'NAME':<20} {'ROLE':<9} {'TENANT':<12} {'ID':<16}  {'CREATED':<19}  STATE"]
    for t in rows:
        state = "valid" if t["revoked_at"] is None else f"revoked {when(t['revoked_at'])}"
        if t["revoked_at"] is None and t["last_used_at"] is not None:
            state += f", last used {when(t['last_used_at'])}"
        lines.append(
            f"{t['name']:<20} {t['role']:<9} {t['tenant'] or '*':<12} {t['id']:<16}  "
            f"{when(t['created_at']):<19}  {state}"
        )
    return "\n".join(lines)
