"""Database URLs as they may be shown: without their passwords.

Errors, log lines and the CLI's output name the database they concern; a URL there is
passed through :func:`redact` first (no driver needed: the CLI uses it too)."""

from __future__ import annotations

import re

_PASSWORD_IN_URL = re.compile(r"(://[^:/?#@\s]*:)[^@/?#\s]*(@)")
_PASSWORD_PARAM = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.I)


def redact(text: str) -> str:
    """``text`` with the password of any URL in it (``scheme://user:PASSWORD@host``) and
    any ``password=`` parameter (a URL's query, a libpq keyword string) shown as ``***``."""
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD_IN_URL.sub(r"\1***\2", text))
