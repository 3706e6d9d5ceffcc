"""Helpers of the tests that run a docs page as written."""

from __future__ import annotations


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a ``console`` block, each with the output lines shown
    under it."""
    found: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return found
