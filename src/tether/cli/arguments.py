"""The argparse types of ``tether``'s options: each refuses a bad value with a usage error
that names what was expected (``a whole number of 1 or more, not 'x'``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tether.engine.registry import parse_modules
from tether.model import inputs
from tether.services.retention import parse_age


def whole_number(low: int = 0, high: int = inputs.INT64_MAX) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (at most 2^63-1, what the
    databases hold), else a usage error naming the range."""

    def parse(text: str) -> int:
        try:
            n = int(text.strip()) if len(text) <= 30 else None
        except ValueError:
            n = None
        if n is None or not low <= n <= high:
            shown = text if len(text) <= 40 else text[:37] + "..."
            bound = f"of at most {high}" if n is not None and n > high else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"a whole number {bound}, not {shown!r}")
        return n

    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


positive_int = whole_number(1)  # an argparse type: a whole number of 1 or more


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (and finite)."""
    try:
        x = float(text) if len(text) <= 40 else 0.0
    except ValueError:
        x = 0.0
    if not 0 < x < float("inf"):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, not {shown!r}")
    return x


def age(text: str) -> float:
    """An argparse type: an age such as 90s, 15m, 12h, 30d or 2w, in seconds."""
    try:
        return parse_age(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def code_modules(text: str) -> frozenset[str]:
    """An argparse type: the module names of one ``--code`` (comma-separated)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a module name is needed, e.g. --code myproject.agents")
    try:
        return parse_modules(text, what="--code")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
