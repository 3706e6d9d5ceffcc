"""GroupCommit: leader/follower batching, with no database (the flush is a function)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tether.store.groupcommit import GroupCommit, Pending


def test_a_lone_writer_is_its_own_batch() -> None:
    seen: list[list[int]] = []

    def flush(batch: list[Pending[int]], lane: int) -> None:
        seen.append([p.item for p in batch])
        for p in batch:
            p.succeed(p.item * 10)

    gc: GroupCommit[int] = GroupCommit(flush)
    assert [gc.submit(i) for i in range(3)] == [0, 10, 20]
    assert seen == [[0], [1], [2]]


def test_writes_queued_during_a_flush_share_the_next_one() -> None:
    release = threading.Event()
    sizes: list[int] = []

    def flush(batch: list[Pending[int]], lane: int) -> None:
        sizes.append(len(batch))
        if len(sizes) == 1:
            release.wait(30)  # the first batch holds the lead while the others queue
        for p in batch:
            p.succeed(p.item)

    gc: GroupCommit[int] = GroupCommit(flush)
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.__setitem__(0, gc.submit(0)))
    first.start()
    while not sizes:
        time.sleep(0.001)
    rest = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, gc.submit(i)))
        for i in range(1, 6)
    ]
    for t in rest:
        t.start()
    while len(gc._queue) < 5:
        time.sleep(0.001)
    release.set()
    for t in [first, *rest]:
        t.join(30)
    assert results == {i: i for i in range(6)}
    assert sizes == [1, 5]
    assert (gc.batches, gc.writes) == (2, 6)


def test_max_batch_splits_a_long_queue() -> None:
    release = threading.Event()
    sizes: list[int] = []

    def flush(batch: list[Pending[int]], lane: int) -> None:
        sizes.append(len(batch))
        if len(sizes) == 1:
            release.wait(30)
        for p in batch:
            p.succeed(p.item)

    gc: GroupCommit[int] = GroupCommit(flush, max_batch=2)
    threads = [threading.Thread(target=gc.submit, args=(i,)) for i in range(6)]
    threads[0].start()
    while not sizes:
        time.sleep(0.001)
    for t in threads[1:]:
        t.start()
    while len(gc._queue) < 5:
        time.sleep(0.001)
    release.set()
    for t in threads:
        t.join(30)
    assert sizes == [1, 2, 2, 1]


def test_each_write_gets_its_own_outcome_and_a_broken_flush_fails_them_all() -> None:
    def flush(batch: list[Pending[int]], lane: int) -> None:
        for p in batch:
            if p.item < 0:
                p.fail(ValueError(f"bad {p.item}"))
            elif p.item == 99:
                raise RuntimeError("the connection broke")
            else:
                p.succeed(p.item)

    gc: GroupCommit[int] = GroupCommit(flush)
    assert gc.submit(1) == 1
    with pytest.raises(ValueError, match="bad -1"):
        gc.submit(-1)
    with pytest.raises(RuntimeError, match="broke"):
        gc.submit(99)
    assert gc.submit(2) == 2  # the lead was given back


def test_a_flush_that_forgets_a_write_fails_it_instead_of_hanging() -> None:
    gc: GroupCommit[int] = GroupCommit(lambda batch, lane: None)
    with pytest.raises(RuntimeError, match="no outcome"):
        gc.submit(1)


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        GroupCommit(lambda batch, lane: None, max_batch=0)


def _recording(linger: float = 0.0) -> tuple[list[list[int]], threading.Event, GroupCommit[int]]:
    """A group commit of one lane whose first flush holds its lane until released; the
    batches it flushed (a negative write fails)."""
    flushed: list[list[int]] = []
    release = threading.Event()

    def flush(batch: list[Pending[int]], lane: int) -> None:
        flushed.append([p.item for p in batch])
        if len(flushed) == 1:
            release.wait(30)
        for p in batch:
            if p.item < 0:
                p.fail(ValueError(f"bad {p.item}"))
            else:
                p.succeed(p.item)

    return flushed, release, GroupCommit(flush, linger=linger)


def test_a_post_with_a_free_lane_is_flushed_by_the_poster() -> None:
    flushed, release, gc = _recording()
    release.set()
    errors: list[BaseException] = []
    gc.post(1, errors.append)
    assert flushed == [[1]] and errors == []


def test_a_post_while_the_lane_is_busy_returns_at_once_and_the_leader_flushes_it() -> None:
    flushed, release, gc = _recording()
    leader = threading.Thread(target=gc.submit, args=(0,))
    leader.start()
    while not flushed:
        time.sleep(0.001)
    errors: list[BaseException] = []
    gc.post(1, errors.append)  # returns although the only lane is busy
    gc.post(-2, errors.append)
    assert flushed == [[0]]
    release.set()
    leader.join(30)
    assert flushed == [[0], [1, -2]]  # the leader went on with the posted writes
    assert [str(e) for e in errors] == ["bad -2"]


def test_drain_flushes_what_was_posted() -> None:
    flushed, release, gc = _recording()
    leader = threading.Thread(target=gc.submit, args=(0,))
    leader.start()
    while not flushed:
        time.sleep(0.001)
    gc.post(5, lambda e: None)
    release.set()
    gc.drain()
    leader.join(30)
    assert [5] in flushed and gc._queue == []


def _until(condition: Callable[[], object], seconds: float = 30.0) -> bool:
    """Whether ``condition()`` came true within ``seconds`` (another thread makes it so)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _two_lanes() -> tuple[list[int], threading.Event, GroupCommit[int]]:
    """A group commit of 2 lanes whose first flush holds its lane until released; the
    lanes each flush used."""
    lanes: list[int] = []
    release = threading.Event()

    def flush(batch: list[Pending[int]], lane: int) -> None:
        lanes.append(lane)
        if len(lanes) == 1:
            release.wait(30)
        for p in batch:
            p.succeed(p.item)

    return lanes, release, GroupCommit(flush, lanes=2)


def _while_lane_0_is_held(gc: GroupCommit[int], lanes: list[int], release: threading.Event) -> None:
    """Submit one write that holds lane 0, then another; release both."""
    first = threading.Thread(target=gc.submit, args=(1,))
    first.start()
    while not lanes:
        time.sleep(0.001)
    second = threading.Thread(target=gc.submit, args=(2,))
    second.start()
    # the second write leads lane 1 at once (its flush is recorded), or queues for lane 0
    assert _until(lambda: len(lanes) == 2 or len(gc._queue) == 1)
    release.set()
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()


def test_a_second_lane_takes_a_write_while_the_first_is_busy() -> None:
    lanes, release, gc = _two_lanes()
    _while_lane_0_is_held(gc, lanes, release)
    assert lanes == [0, 1]


def test_set_active_narrows_the_lanes_and_widens_them_again() -> None:
    lanes, release, gc = _two_lanes()
    gc.set_active(1)
    _while_lane_0_is_held(gc, lanes, release)
    assert lanes == [0, 0] and gc.active == 1  # the second write waited for lane 0
    gc.set_active(0)  # clamped to 1..lanes
    assert gc.active == 1
    gc.set_active(9)
    assert gc.active == 2
    lanes.clear()
    release.clear()
    _while_lane_0_is_held(gc, lanes, release)
    assert lanes == [0, 1]


def test_a_lane_narrowed_away_while_busy_finishes_its_batch_and_stays_unused() -> None:
    used: list[int] = []
    release = threading.Event()

    def flush(batch: list[Pending[int]], lane: int) -> None:
        used.append(lane)
        if len(used) <= 2:
            release.wait(30)  # the first two batches hold lanes 0 and 1
        for p in batch:
            p.succeed(p.item)

    gc: GroupCommit[int] = GroupCommit(flush, lanes=2)
    writers = [threading.Thread(target=gc.submit, args=(i,)) for i in (1, 2)]
    for t in writers:
        t.start()
        while len(used) < writers.index(t) + 1:
            time.sleep(0.001)
    assert sorted(used) == [0, 1]
    gc.set_active(1)  # lane 1 is busy: it finishes its batch, then stays unused
    release.set()
    for t in writers:
        t.join(30)
    assert gc._free == [0] and gc._busy == set()
    assert gc.submit(3) == 3 and used[-1] == 0


@pytest.mark.parametrize("linger", [0.0, 0.0003, 0.05])
def test_many_threads_lanes_changing_and_posted_writes_lose_no_wakeup(linger: float) -> None:
    """Each waiting thread sleeps on its own write's gate: a batch wakes its writers and
    one leader per free lane. Under load, with lanes narrowed and widened and posted
    writes mixed in, every write gets its own outcome and no thread is left asleep; with
    lingering too, and no posted write is left queued once every writer has returned
    (each thread's last write is posted, as a worker run's final event is)."""
    import random

    posted: list[int] = []
    lock = threading.Lock()

    def flush(batch: list[Pending[int]], lane: int) -> None:
        time.sleep(random.random() / 5000)  # 0-200 µs: writes queue behind the flush
        for p in batch:
            if p.item < 0:
                with lock:
                    posted.append(p.item)
            p.succeed(p.item * 2)

    gc: GroupCommit[int] = GroupCommit(flush, lanes=3, max_batch=4, linger=linger)
    results: dict[int, int] = {}
    stop = threading.Event()

    def writer(t: int) -> None:
        for i in range(150):
            item = t * 1000 + i
            if i % 10 == 0:
                gc.post(-item - 1, lambda e: None)
            results[item] = gc.submit(item)
            if random.random() < 0.05:
                time.sleep(linger * 2)  # a slow step: lingerers stop waiting for it
        gc.post(-t * 1000 - 999, lambda e: None)

    def steer() -> None:
        while not stop.is_set():
            gc.set_active(random.choice([1, 2, 3]))
            time.sleep(0.001)

    steering = threading.Thread(target=steer, daemon=True)
    steering.start()
    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20  # a lost wake-up leaves a thread asleep for good
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    steering.join(30)
    assert not any(t.is_alive() for t in threads), "a waiting thread was never woken"
    assert gc._queue == [], "a posted write was left for a leader that never came"
    gc.drain()
    assert results == {t * 1000 + i: (t * 1000 + i) * 2 for t in range(12) for i in range(150)}
    every_tenth = [t * 1000 + i for t in range(12) for i in range(0, 150, 10)]
    lasts = [t * 1000 + 998 for t in range(12)]
    assert sorted(posted) == sorted(-item - 1 for item in every_tenth + lasts)


def _released_together(linger: float) -> tuple[list[list[int]], GroupCommit[int]]:
    """A group commit of one lane where writes 2 and 3, of two threads, were committed
    together (queued behind a posted write, 0): two writers are out. The batches."""
    flushed, hold, gc = _recording(linger)
    poster = threading.Thread(target=gc.post, args=(0, lambda e: None))
    poster.start()  # nobody was out: it flushes its write at once
    while not flushed:
        time.sleep(0.001)
    writers = [threading.Thread(target=gc.submit, args=(i,)) for i in (2, 3)]
    for t in writers:
        t.start()
    while len(gc._queue) < 2:
        time.sleep(0.001)
    hold.set()
    for t in [poster, *writers]:
        t.join(30)
    assert flushed == [[0], [2, 3]]
    return flushed, gc


def test_writers_a_batch_released_share_the_next_one_when_the_first_back_lingers() -> None:
    # writes 2 and 3 were committed together; their threads come back one after the
    # other: with lingering the first waits for the second, without it leads alone
    flushed, gc = _released_together(linger=30.0)
    writers = [threading.Thread(target=gc.submit, args=(i,)) for i in (4, 5)]
    writers[0].start()
    assert _until(lambda: gc._lingerer is not None)  # the first back lingers…
    writers[1].start()  # …when the second comes back
    for t in writers:
        t.join(30)
    assert flushed[2:] == [[4, 5]]

    flushed, gc = _released_together(linger=0.0)
    writers = [threading.Thread(target=gc.submit, args=(i,)) for i in (4, 5)]
    for t in writers:
        t.start()
        t.join(30)
    assert flushed[2:] == [[4], [5]]


def test_a_lone_writer_never_lingers() -> None:
    # each of its writes is the only one out: it leads at once, whatever the linger
    flushed: list[list[int]] = []

    def flush(batch: list[Pending[int]], lane: int) -> None:
        flushed.append([p.item for p in batch])
        for p in batch:
            p.succeed(p.item)

    gc: GroupCommit[int] = GroupCommit(flush, linger=60.0)
    writer = threading.Thread(target=lambda: [gc.submit(i) for i in range(5)], daemon=True)
    writer.start()
    writer.join(10)
    assert not writer.is_alive() and flushed == [[0], [1], [2], [3], [4]]


def test_a_lingerer_stops_waiting_for_writers_that_do_not_come_back() -> None:
    # 2 and 3 were released; only 2 writes again (3's run ended): after the linger the
    # write leads alone, and the next write does not linger for 3 again
    flushed, gc = _released_together(linger=0.2)
    started = time.monotonic()
    assert gc.submit(4) == 4
    assert time.monotonic() - started >= 0.2  # it waited the linger out (a lower bound)
    # 3 is waited for no more: the only writer out is 4's own thread, so the next write
    # (5, which counts as it coming back) finds nobody to linger for
    assert gc._awake == 1 and gc._lingerer is None
    writer = threading.Thread(target=gc.submit, args=(5,), daemon=True)
    writer.start()
    writer.join(30)
    assert not writer.is_alive()
    assert flushed[2:] == [[4], [5]]


def test_a_posting_lingerer_is_taken_over_by_a_writer_that_comes_back() -> None:
    # 2 posts its run's final event (nobody waits for it) while 3 is still out: 2's
    # thread lingers for 3, and leaves as soon as 3 comes back, 3 leading both
    flushed, gc = _released_together(linger=30.0)
    posted = threading.Thread(target=gc.post, args=(20, lambda e: None))
    posted.start()
    while gc._lingerer is None:
        time.sleep(0.001)
    assert posted.is_alive()
    assert gc.submit(30) == 30
    posted.join(30)
    assert not posted.is_alive() and [sorted(b) for b in flushed[2:]] == [[20, 30]]


def test_linger_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="linger"):
        GroupCommit(lambda batch, lane: None, linger=-1)
