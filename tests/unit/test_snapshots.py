"""Snapshot format 2: a root plus pages of steps that load lazily, one page at a time."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from tether.errors import StoreError
from tether.model import codec
from tether.model import events as ev
from tether.model.events import Event
from tether.model.state import RunState, fold, to_data
from tether.model.steps import Pages, StepList, StepState, Usage, step_usage, usage_of
from tether.store import snapshots

pytestmark = pytest.mark.unit

PAGE = 4


def _log(n_steps: int, first_seq: int = 1, first_pos: int = 1) -> list[Event]:
    raw: list[tuple[str, dict[str, Any]]] = []
    if first_seq == 1:
        created = {"agent": "a", "version": None, "input": {}, "code": {}}
        raw = [(ev.RUN_CREATED, created), (ev.RUN_STARTED, {"by": "w", "epoch": 1})]
    for pos in range(first_pos, first_pos + n_steps):
        done = {"pos": pos, "name": f"s{pos}", "kind": "step", "attempt": 1, "output": pos}
        raw.append((ev.STEP_COMPLETED, done))
    return [
        Event("r1", seq, t, codec.encode(d), float(seq), "w")
        for seq, (t, d) in enumerate(raw, first_seq)
    ]


class Blobs:
    """Pages in memory, counting every read."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads: Counter[str] = Counter()

    def get(self, digest: str) -> bytes:
        self.reads[digest] += 1
        return self.data[digest]

    def snapshot(self, state: RunState) -> tuple[RunState, dict[str, bytes]]:
        encoded = snapshots.encode(state, page_size=PAGE)
        self.data.update(encoded.pages)
        return snapshots.decode(encoded.root, self.get), encoded.pages


def test_the_head_loads_no_page() -> None:
    blobs = Blobs()
    state, written = blobs.snapshot(fold(_log(10)))
    assert len(written) == 2  # positions 1-8; 9 and 10 are the root's tail
    assert isinstance(state.steps, StepList) and len(state.steps) == 10
    assert state.committed == 10 and state.position == 11 and state.status == "running"
    assert state.describe_position() == "step 11, 1–10 committed"
    assert state.steps[-1].output == 10 and state.step(9) is not None
    assert not blobs.reads


def test_each_page_loads_once_when_read() -> None:
    blobs = Blobs()
    state, _ = blobs.snapshot(fold(_log(10)))
    assert state.steps[4].output == 5
    assert sum(blobs.reads.values()) == 1
    assert [s.output for s in state.steps] == list(range(1, 11))
    assert state.steps[1:6] == tuple(fold(_log(10)).steps[1:6])
    assert sorted(blobs.reads.values()) == [1, 1]


def test_fold_onto_a_lazy_state_loads_nothing_and_shares_pages() -> None:
    blobs = Blobs()
    state, _ = blobs.snapshot(fold(_log(10)))
    head = fold(_log(3, first_seq=13, first_pos=11), start=state)
    assert isinstance(head.steps, StepList) and len(head.steps) == 13
    assert head.committed == 13 and head.steps[12].output == 13
    again, written = blobs.snapshot(head)
    assert len(written) == 1  # only the new full page 9-12; 1-8 are shared
    assert again.committed == 13 and again == fold(_log(13))
    assert blobs.reads  # equality read the pages…
    assert not blobs.reads - Counter(dict.fromkeys(blobs.reads, 1))  # …once each


def test_an_unchanged_prefix_writes_no_page() -> None:
    blobs = Blobs()
    state, _ = blobs.snapshot(fold(_log(10)))
    head = fold(_log(1, first_seq=13, first_pos=11), start=state)
    _, written = blobs.snapshot(head)
    assert written == {} and not blobs.reads


def test_a_change_below_committed_keeps_the_count_without_loading_pages() -> None:
    blobs = Blobs()
    state, _ = blobs.snapshot(fold(_log(10)))
    failed = {"pos": 2, "name": "s2", "kind": "step", "attempt": 2, "error": {"m": "x"}}
    event = Event("r1", 13, ev.STEP_FAILED, codec.encode(failed), 13.0, "w")
    head = fold([event], start=state)
    assert head.committed == 1 and head.position == 2
    assert sum(blobs.reads.values()) == 1  # the page of position 2, for its old errors
    assert head == fold([*_log(10), event])


def test_a_format_1_snapshot_still_loads() -> None:
    whole = fold(_log(10))
    state = snapshots.decode(codec.encode(to_data(whole)), Blobs().get)
    assert state == whole and isinstance(state.steps, tuple)
    assert fold(_log(2, first_seq=13, first_pos=11), start=state) == fold(_log(12))


def test_a_corrupt_page_is_named() -> None:
    blobs = Blobs()
    state, written = blobs.snapshot(fold(_log(10)))
    digest = next(iter(written))
    blobs.data[digest] = b"[]"
    with pytest.raises(StoreError, match=f"page {digest} is corrupt"):
        list(state.steps)


def _list_of(n_pages: int, tail: int, page_size: int = 2) -> tuple[StepList, list[str]]:
    """A StepList over ``n_pages`` stored pages and ``tail`` inline steps; the digests of
    the pages it loaded, in order."""
    loaded: list[str] = []

    def load(digest: str) -> list[StepState]:
        loaded.append(digest)
        k = int(digest.removeprefix("p"))
        return [
            StepState(k * page_size + i + 1, f"s{k * page_size + i}", "step", "completed")
            for i in range(page_size)
        ]

    pages = Pages(tuple(f"p{k}" for k in range(n_pages)), page_size, load)
    base = n_pages * page_size
    rest = [StepState(base + i + 1, f"s{base + i}", "step", "completed") for i in range(tail)]
    return StepList(pages, rest, committed=base + tail), loaded


def test_a_step_list_equals_a_sequence_of_equal_steps_and_nothing_else() -> None:
    steps, _ = _list_of(1, 1)
    assert steps == tuple(steps) and steps == list(steps)
    assert steps != tuple(steps)[:2] and steps != ()
    for other in (None, 3, "abc", b"abc", {"a": 1}):
        assert steps != other  # unequal, not an error
        assert not steps == other  # noqa: SIM201


def test_a_step_list_says_how_many_of_its_pages_are_loaded() -> None:
    steps, loaded = _list_of(2, 1)
    assert repr(steps) == "<StepList of 5 steps, 0/2 pages loaded>"
    assert steps[3].name == "s3" and loaded == ["p1"]
    assert repr(steps) == "<StepList of 5 steps, 1/2 pages loaded>"


def test_a_stored_page_of_the_wrong_size_is_refused_naming_it() -> None:
    pages = Pages(("p0",), 3, lambda digest: [StepState(1, "s0", "step", "completed")])
    with pytest.raises(ValueError, match=r"^snapshot page p0 holds 1 steps$"):
        StepList(pages, (), committed=0)[0]


def test_a_step_list_index_past_either_end_is_an_index_error_saying_so() -> None:
    steps, _ = _list_of(2, 1)
    assert steps[-1].name == "s4" and steps[-5].name == "s0"
    for i in (5, -6):
        with pytest.raises(IndexError, match=rf"^step index {i} out of range for 5 steps$"):
            steps[i]


def test_only_the_pages_with_a_changed_position_are_encoded_again() -> None:
    steps, _ = _list_of(3, 0)
    changed = steps.derive({3: StepState(4, "new", "step", "completed")}, n=6, committed=6)
    assert changed.stored_digests() == ["p0", None, "p2"]  # position 3: page 1's second
    assert changed[3].name == "new" and steps.stored_digests() == ["p0", "p1", "p2"]


def test_usage_is_read_from_a_result_object_as_from_a_dict() -> None:
    as_object = SimpleNamespace(usage=SimpleNamespace(prompt_tokens=3, completion_tokens=4))
    as_dict = {"usage": {"input_tokens": 3, "output_tokens": 4}}
    expected = {"input_tokens": 3, "output_tokens": 4, "cost": 0.0, "calls": 1}
    assert usage_of(as_object) == usage_of(as_dict) == expected
    assert usage_of(SimpleNamespace(text="no usage")) is None


def test_usage_reads_each_documented_name_for_a_cost() -> None:
    for name in ("cost", "cost_usd"):
        assert usage_of({"usage": {name: 0.25}}) == {
            "input_tokens": 0, "output_tokens": 0, "cost": 0.25, "calls": 1,
        }  # fmt: skip
    assert usage_of({"usage": {"cost": 0.5, "cost_usd": 0.25}})["cost"] == 0.5  # type: ignore[index]


def test_only_a_model_call_s_output_is_read_for_usage() -> None:
    """A tool or a step may return a dict that has a "usage" key (a meter reading, a
    quota): it is their output, not tokens spent. Only a model call's counts."""
    out = {"usage": {"input_tokens": 10, "output_tokens": 2, "cost": 0.5}}
    assert step_usage({"kind": "llm", "output": out}) == Usage(10, 2, 0.5, 1)
    for kind in ("tool", "step"):
        assert step_usage({"kind": kind, "output": out}) is None
    recorded = {"input_tokens": 1, "output_tokens": 1, "cost": 0.0, "calls": 1}
    assert step_usage({"kind": "tool", "output": out, "usage": recorded}) == Usage(1, 1, 0.0, 1)
