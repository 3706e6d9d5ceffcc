"""Log lines of ``tether``: text (the default), or with ``--log-format json`` (or
``$TETHER_LOG_FORMAT=json``) one JSON object per line, on the stdlib logging module.

A JSON line holds ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, and
where known: ``run_id`` (the run whose agent or step the line was logged from, or an
``extra={"run_id": …}``), ``step`` (its name), ``worker`` (the worker process's id) and
``error`` (the traceback, when one is logged).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from tether.engine.calls import _AGENT, _CURRENT

LOG_FORMAT_ENV = "TETHER_LOG_FORMAT"
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def chosen(given: str | None) -> str:
    """The format of --log-format, else of $TETHER_LOG_FORMAT, else text; ValueError for
    a value of the variable that names no format."""
    value = given or os.environ.get(LOG_FORMAT_ENV) or "text"
    if value not in FORMATS:
        raise ValueError(f"${LOG_FORMAT_ENV} must be text or json, not {value[:40]!r}")
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring); ``fields`` are added to
    every line (the worker's id)."""

    def __init__(self, **fields: str) -> None:
        super().__init__()
        self.fields = fields

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
        }
        step = _CURRENT.get()
        run_id = getattr(record, "run_id", None) or (step.run_id if step else _AGENT.get())
        if run_id:
            line["run_id"] = run_id
        if step is not None:
            line["step"] = step.name
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"


def configure(form: str, level: int, **fields: str) -> None:
    """Send the log records of ``level`` and above to stderr, as text or JSON (replacing
    the handlers a previous call installed)."""
    handler = logging.StreamHandler()
    formatter = JsonFormatter(**fields) if form == "json" else logging.Formatter(TEXT)
    # text keeps the lines it always had (the worker's id is in their messages)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_tether", False)]:
        root.removeHandler(old)
    handler._tether = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
