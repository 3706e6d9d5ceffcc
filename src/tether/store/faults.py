"""The backends' boundary: whatever fails below a Store method becomes one of tether's
errors (:mod:`tether.errors`), naming the operation and its run.

Each backend is decorated with :func:`translated`, which wraps its public methods, and
translates the block of its ``transaction()`` with :func:`translating`; both hand what
escapes to the backend's ``_fault(error, where)``, which knows its driver's errors and
uses :func:`data_fault` for the rest (a value that cannot be sent, a row that cannot be
read). What no rule knows is raised as it is: a bug of tether's own stays visible.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tether.errors import CorruptRecord, EncodeError, TetherError
from tether.store.protocols import Store


def schema_number(value: Any, where: str) -> int:
    """tether_meta's schema_version as an int; CorruptRecord naming ``where`` when it is
    not one (the table was changed by hand or by another program)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise CorruptRecord(
            f"{where}: tether_meta's schema_version is {value!r}, not a number: the table was "
            f"changed by another program or damaged. Restore the database from a backup, or "
            f"set it to the number of the last migration applied (nothing was changed)."
        ) from None


_S = TypeVar("_S")
STORE_METHODS = tuple(
    sorted(
        {
            n
            for role in Store.__mro__  # the role protocols Store is made of
            if getattr(role, "_is_protocol", False)
            for n, v in vars(role).items()
            if not n.startswith("_") and callable(v)
        }
    )
)


def translated(cls: type[_S]) -> type[_S]:
    """Class decorator of a backend: each of its Store methods (and its other public
    methods) raises tether's errors only, whatever fails below it.

    An exception that is not tether's goes to ``self._fault(error, where)``, which returns
    the tether error to raise instead (or None: raised as it is, a bug of tether's own).
    ``where`` names the operation and its run, so each call site does not have to.
    """
    for name in dir(cls):
        fn = inspect.getattr_static(cls, name)
        if name.startswith("_") or not inspect.isfunction(fn) or name == "transaction":
            continue  # transaction(): a context manager, which translates in its body
        if not hasattr(fn, "__wrapped__"):  # a base's (tether.store.sqlbase) is guarded here
            setattr(cls, name, _guarded(name, fn))
    return cls


def _guarded(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    params = list(inspect.signature(fn).parameters)[1:]
    first = params[0] if params else ""

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except TetherError:
            raise
        except Exception as e:
            error = self._fault(e, _where(op, first, args, kwargs))
            if error is None:
                raise
            raise error from None

    return method


@contextmanager
def translating(
    fault: Callable[[Exception, str], TetherError | None], where: str
) -> Iterator[None]:
    """As :func:`translated`, for a block (a backend's ``transaction()``, a context manager)."""
    try:
        yield
    except TetherError:
        raise
    except Exception as e:
        error = fault(e, where)
        if error is None:
            raise
        raise error from None


def _where(op: str, first: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``op`` and, when its first argument names one, the run it concerns."""
    value = args[0] if args else kwargs.get(first)
    if first == "run_id" and isinstance(value, str):
        return f"{op} (run {value!r})"
    run_id = getattr(value, "id", None)
    if first == "run" and isinstance(run_id, str):
        return f"{op} (run {run_id!r})"
    return op


def data_fault(e: BaseException, where: str) -> TetherError | None:
    """The tether error of a value that cannot be sent, or a row that cannot be read
    (both backends); None for anything else."""
    if isinstance(e, UnicodeEncodeError | OverflowError):
        what = (
            "text that is not Unicode (a lone surrogate)"
            if isinstance(e, UnicodeEncodeError)
            else "an integer out of the database's range (64 bits)"
        )
        return EncodeError(
            f"{where}: cannot store {what} ({e}); nothing was written. Pass Unicode text "
            f"and integers within +-2**63."
        )
    if isinstance(e, json.JSONDecodeError | UnicodeDecodeError):  # orjson's is the first
        return CorruptRecord(
            f"{where}: a stored row cannot be read ({e}): it was written by another program "
            f"or damaged. Restore the database from a backup; tether did not change it."
        )
    return None
