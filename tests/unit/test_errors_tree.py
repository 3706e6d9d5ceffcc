"""errors.py draws its exception tree in its docstring: every class is in it, under its
parent."""

from __future__ import annotations

import inspect
import re

import pytest

from tether import errors

pytestmark = pytest.mark.unit


def test_the_drawn_tree_names_every_error_under_its_parent() -> None:
    doc = errors.__doc__ or ""
    drawn = {}  # name -> the depth it is drawn at
    parents: dict[str, str] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        m = re.match(r"^\s{4}((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\s", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        drawn[m.group(2)] = depth
        del stack[depth:]
        if stack:
            parents[m.group(2)] = stack[-1]
        stack.append(m.group(2))
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__ == errors.__name__
    }
    assert set(classes) == set(drawn), set(classes) ^ set(drawn)
    for name, parent in parents.items():
        assert issubclass(classes[name], classes[parent]), (name, parent)
