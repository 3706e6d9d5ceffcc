"""Live views: ``tether log -f`` follows a run's events as they are written, and
``tether runs --watch`` redraws the run list.

Both poll the database (every ``--interval`` seconds), so they see what any process
writes, on SQLite and PostgreSQL alike: a run's events are read past the last seq shown (a
range of the events index), never all again. Ctrl-C ends them without an error line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tether.cli import format as fmt
from tether.cli.context import Context
from tether.model.events import Event
from tether.model.status import FINISHED
from tether.scoped import ScopedApp

INTERRUPTED = 130  # the shell's code for a process ended by SIGINT
CLEAR = "\x1b[H\x1b[2J"  # ANSI: cursor home, erase the screen (no curses needed)


def follow(
    ctx: Context, view: ScopedApp, run_id: str, *, after: int, as_json: bool, interval: float
) -> int:
    """Print the run's events with seq > ``after`` as they are written, until the run
    ends (0) or Ctrl-C (130, quietly). The status is read before the events: a run whose
    status was final then has its final event among them (one transaction writes both)."""
    if not as_json:
        _emit(ctx, f"{'SEQ':>5}  {'TIME':<12}  {'TYPE':<20}  SUMMARY")
    try:
        while True:
            ended = view.record(run_id).status in FINISHED
            events = view.events(run_id, after=after)
            for e in events:
                _emit(ctx, fmt.event_line(e) if as_json else _event_row(e))
            after = events[-1].seq if events else after
            if ended:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return INTERRUPTED


def watch(ctx: Context, render: Callable[[], str], *, interval: float, title: str) -> int:
    """Redraw ``render()`` every ``interval`` seconds until Ctrl-C (0). On a terminal the
    screen is cleared first; otherwise a block, under a line with its time, is printed
    each time the text changes (a log or a pipe gets each change once)."""
    tty = ctx.out.isatty()
    shown: str | None = None
    try:
        while True:
            text = render()
            if tty:
                _emit(ctx, f"{CLEAR}every {interval:g}s: {title}    {fmt.when(time.time())}\n")
                _emit(ctx, text)
            elif text != shown:
                _emit(ctx, f"-- {fmt.when(time.time())} --\n{text}\n")
            shown = text
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def _event_row(e: Event) -> str:
    summary = fmt.event_summary(e.type, e.payload())
    return f"{e.seq:>5}  {fmt.when(e.at, date=False):<12}  {e.type:<20}  {summary}".rstrip()


def _emit(ctx: Context, text: str) -> None:
    ctx.print(text)
    ctx.out.flush()  # a pipe or a file sees each line as it is written
