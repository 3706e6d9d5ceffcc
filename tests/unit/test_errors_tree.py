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


def _classes() -> dict[str, type[BaseException]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == errors.__name__
    }


def _drawn_tree() -> list[tuple[int, str, str]]:
    """(depth, name, branch) of each line of the docstring's first literal block, the tree;
    branch is '├', '└' or '' (the root)."""
    lines = (errors.__doc__ or "").split("::\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    drawn = []
    for line in lines:
        m = re.fullmatch(r"    ((?:│   |    )*)(?:([├└])── )?([A-Z]\w+) +(\S.*)", line)
        assert m, f"not a line of the tree: {line!r}"
        depth = len(m.group(1)) // 4 + (1 if m.group(2) else 0)
        drawn.append((depth, m.group(3), m.group(2) or ""))
    return drawn


def test_every_error_is_drawn_once_under_its_own_parent() -> None:
    """The parent drawn is the class's base in this module, not merely an ancestor, and
    the tree has one root."""
    classes = _classes()
    drawn = _drawn_tree()
    names = [name for _, name, _ in drawn]
    assert sorted(names) == sorted(classes), set(names) ^ set(classes)
    assert [name for depth, name, _ in drawn if depth == 0] == ["TetherError"]
    stack: list[str] = []
    for depth, name, _ in drawn:
        del stack[depth:]
        assert len(stack) == depth, f"{name} is drawn deeper than its parent"
        ours = [b.__name__ for b in classes[name].__bases__ if b.__name__ in classes]
        assert ours == stack[-1:], f"{name} is drawn under {stack[-1:]}, its base is {ours}"
        stack.append(name)


def test_the_branches_are_drawn_right() -> None:
    """'└──' marks the last child of a parent and '├──' every other one."""
    drawn = _drawn_tree()
    for i, (depth, name, branch) in enumerate(drawn):
        if depth == 0:
            continue
        later = [d for d, _, _ in drawn[i + 1 :]]
        # the next line at this depth or above: a sibling only if it is at this depth
        nxt = next((d for d in later if d <= depth), None)
        assert branch == ("├" if nxt == depth else "└"), name


def test_the_built_in_bases_are_named() -> None:
    """An error that is also a built-in exception (``except ValueError`` catches it) says so
    in the docstring, and nothing else does."""
    doc = errors.__doc__ or ""
    said = {
        m.group(1): set(re.split(r" and an? ", m.group(2)))
        for m in re.finditer(r"^    ([A-Z]\w+) +also an? (.+)$", doc, flags=re.M)
    }
    actual = {}
    for name, cls in _classes().items():
        builtin = {b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"}
        builtin.discard("Exception")
        if builtin:
            actual[name] = builtin
    assert said == actual
