"""A run's steps: StepState (one position), its Usage, and StepList, the steps as a
read-only sequence whose stored part loads page by page.

A snapshot (format 2, see :mod:`tether.store.snapshots`) keeps a run's steps as *pages* of
``page_size`` positions, stored by digest, plus an inline *tail* of the positions after
the last full page. A :class:`StepList` built from it answers ``len()`` and reads of
the tail without loading anything, and loads a page the first time one of its
positions is read (once: the page cache is shared by every list derived from it).

``fold(events, start=state)`` never materializes such a list: it keeps the changed
and appended positions in an *overlay* and derives a new list that shares the pages.
Pure: loading a page is a callable given by whoever decoded the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, overload

from tether.model.status import UNRECORDED, StepStatus

# The kind of a revert's record (tether.engine.revert): the undo of one call, kept in
# RunState.reverts at the call's position, never among the steps.
REVERT = "revert"


@dataclass(frozen=True, slots=True)
class Usage:
    """Model usage: tokens in and out, cost (in the unit the model reports), calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost + other.cost,
            self.calls + other.calls,
        )


@dataclass(frozen=True, slots=True)
class StepState:
    """One position of a run: a step, model call, decision or variable write.

    A position with status ``unrecorded`` (no name, no kind) has no event yet while a later
    one has: a branch of a fan-out still in flight when the process stopped, whose sibling
    finished first (see :func:`unrecorded`). Replay executes it again.
    """

    position: int
    name: str
    kind: str  # step | llm | tool | decide | var | approve | sleep | wait | compensate | revert
    status: str  # running | retrying | completed | failed | waiting | in_doubt | unrecorded
    # | proposed (a judged tool call waiting for its approval: tether.model.verdicts)
    attempts: int = 0
    input_digest: str | None = None
    output: Any = None
    errors: tuple[Mapping[str, Any], ...] = ()
    started_at: float | None = None
    finished_at: float | None = None
    duration: float | None = None
    next_retry_at: float | None = None
    usage: Usage | None = None
    why: str | None = None  # decisions: the rationale
    seq: int = 0  # the event that last changed this step
    key: str | None = None  # tools: the idempotency key
    due_at: float | None = None  # timers: wake time; approvals and waits: timeout
    detail: Mapping[str, Any] | None = None  # tool risk, approval payload and approvers…


PageLoader = Callable[[str], Sequence[StepState]]


@dataclass(frozen=True, slots=True)
class Pages:
    """The full pages of a snapshot: their digests in order, and how to load one.

    ``cache`` holds the pages already loaded (by index); lists that share these pages
    share it, so each page is loaded at most once.
    """

    digests: tuple[str, ...]
    size: int
    load: PageLoader
    cache: dict[int, Sequence[StepState]] = field(default_factory=dict, compare=False)

    @property
    def positions(self) -> int:
        """How many positions the pages hold."""
        return len(self.digests) * self.size

    def step(self, index: int) -> StepState:
        """The step at 0-based ``index`` (< ``positions``), loading its page if needed."""
        k, i = divmod(index, self.size)
        page = self.cache.get(k)
        if page is None:
            page = self.load(self.digests[k])
            if len(page) != self.size:
                raise ValueError(f"snapshot page {self.digests[k]} holds {len(page)} steps")
            self.cache[k] = page
        return page[i]


class StepList(Sequence["StepState"]):
    """A run's steps: stored pages, an inline tail, and an overlay of changed positions.

    Read-only. ``len()`` and ``committed`` never load a page; indexing loads at most one;
    iteration, slicing and equality load the pages they need. Equal to any sequence
    (a tuple too) holding equal steps in the same order.
    """

    __slots__ = ("_n", "_over", "_pages", "_tail", "committed")

    def __init__(
        self,
        pages: Pages,
        tail: Sequence[StepState],
        *,
        over: Mapping[int, StepState] | None = None,
        n: int | None = None,
        committed: int,
    ) -> None:
        self._pages = pages
        self._tail = tuple(tail)
        self._over = dict(over or {})  # 0-based index -> step, over pages and tail
        self._n = pages.positions + len(self._tail) if n is None else n
        self.committed = committed  # how many leading positions are completed

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> StepState: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[StepState, ...]: ...

    def __getitem__(self, i: int | slice) -> StepState | tuple[StepState, ...]:
        if isinstance(i, slice):
            return tuple(self._at(j) for j in range(*i.indices(self._n)))
        j = i + self._n if i < 0 else i
        if not 0 <= j < self._n:
            raise IndexError(f"step index {i} out of range for {self._n} steps")
        return self._at(j)

    def _at(self, j: int) -> StepState:
        step = self._over.get(j)
        if step is not None:
            return step
        if j < self._pages.positions:
            return self._pages.step(j)
        return self._tail[j - self._pages.positions]

    def __iter__(self) -> Iterator[StepState]:
        for j in range(self._n):
            yield self._at(j)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so not hashable

    def __repr__(self) -> str:
        loaded = len(self._pages.cache)
        return f"<StepList of {self._n} steps, {loaded}/{len(self._pages.digests)} pages loaded>"

    @property
    def pages(self) -> Pages:
        """The stored pages under this list (shared with the lists derived from it)."""
        return self._pages

    def derive(self, over: Mapping[int, StepState], n: int, committed: int) -> StepList:
        """This list with the positions of ``over`` (0-based) replaced or appended, ``n``
        positions in all and ``committed`` of them completed; shares the pages."""
        return StepList(
            self._pages, self._tail, over={**self._over, **over}, n=n, committed=committed
        )

    def stored_digests(self) -> list[str | None]:
        """Per full page of the stored pages: its digest when none of its positions
        changed since, else None (it must be encoded again)."""
        touched = {j // self._pages.size for j in self._over}
        return [None if k in touched else d for k, d in enumerate(self._pages.digests)]


def committed_of(steps: Sequence[StepState]) -> int:
    """How many leading positions of ``steps`` are completed (no page load for a
    StepList)."""
    if isinstance(steps, StepList):
        return steps.committed
    n = 0
    for s in steps:
        if s.status != StepStatus.COMPLETED:
            break
        n += 1
    return n


def unrecorded(pos: int) -> StepState:
    """The step of a position that has no event while a later one has (see StepState)."""
    return StepState(pos, "", "", UNRECORDED)


def usage_of(result: Any) -> dict[str, Any] | None:
    """Token usage and cost from a model result, when it reports them.

    Understands ``{"usage": {"input_tokens"|"prompt_tokens", "output_tokens"|
    "completion_tokens", "cost"|"cost_usd"}}`` and objects with a ``usage`` attribute.
    """
    usage = result.get("usage") if isinstance(result, dict) else getattr(result, "usage", None)
    if usage is None:
        return None

    def pick(*names: str) -> Any:
        for n in names:
            v = usage.get(n) if isinstance(usage, dict) else getattr(usage, n, None)
            if v is not None:
                return v
        return 0

    return {
        "input_tokens": int(pick("input_tokens", "prompt_tokens")),
        "output_tokens": int(pick("output_tokens", "completion_tokens")),
        "cost": float(pick("cost", "cost_usd")),
        "calls": 1,
    }


def step_usage(d: dict[str, Any]) -> Usage | None:
    """A step's usage: recorded (older logs), else read from a model call's output."""
    raw = d.get("usage") or (usage_of(d.get("output")) if d.get("kind") == "llm" else None)
    return Usage(**raw) if raw else None


# -- snapshots: steps <-> plain data (encoded with tether.model.codec by the caller) --


def usage_data(u: Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cost": u.cost,
        "calls": u.calls,
    }


def step_data(s: StepState) -> dict[str, Any]:
    """One step as plain data (a snapshot page holds a list of these)."""
    out = {f.name: getattr(s, f.name) for f in fields(StepState)}
    out["usage"] = usage_data(s.usage)
    out["errors"] = list(s.errors)
    return out


def step_from(d: Mapping[str, Any]) -> StepState:
    """Inverse of :func:`step_data`."""
    x = dict(d)
    x["usage"] = Usage(**x["usage"]) if x.get("usage") else None
    x["errors"] = tuple(x["errors"])
    return StepState(**x)


def differs(rec: StepState, kind: str, name: str, digest: str | None) -> dict[str, Any]:
    """Why a call is not the step ``rec`` recorded at its position: ``{field: (recorded,
    found)}`` for kind, name, and a tool's args digest (when both are known); empty when
    replay may return the record. Replay's one comparison (Journal.slot,
    engine.dry)."""
    out = {f: (r, c) for f, r, c in (("kind", rec.kind, kind), ("name", rec.name, name)) if r != c}
    if not out and digest is not None and rec.input_digest not in (None, digest):
        out["args"] = (rec.input_digest, digest)
    return out
