"""The timer index alone (SPEC T1, DEC-timer-slot-files): slot files, order, duplicates, stale
pairs, emptied slots unlinked only after confirmation and the checkpoint's flush; a fake clock
(every call is given its ``now``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clepsydra_store.engine.index import timer_index
from clepsydra_store.engine.index.timer_index import NO_TIMER, SLOT_MS, TimerIndex

BASE = 1_700_000_000_000


def _codes(live: dict[int, int]):  # type: ignore[no-untyped-def]
    return lambda qs: [live.get(q) for q in qs]


def test_due_pairs_come_earliest_first_and_never_early(tmp_path: Path) -> None:
    index = TimerIndex(tmp_path)
    live = {0: BASE + 2_500, 1: BASE + 100, 2: BASE + 900, 3: BASE + 5_000}
    for q, ts in live.items():
        index.add(q, ts)
    assert index.due(BASE + 99, 10, _codes(live)) == []
    assert index.next_due == BASE + 100
    assert index.due(BASE + 900, 10, _codes(live)) == [(1, BASE + 100), (2, BASE + 900)]
    assert index.due(BASE + 2_499, 10, _codes(live)) == [(1, BASE + 100), (2, BASE + 900)]
    live[1] = live[2] = -1  # handed over: their pairs are stale
    assert index.due(BASE + 2_499, 10, _codes(live)) == []
    assert index.next_due == BASE + 2_500
    assert index.due(BASE + 9_999, 1, _codes(live)) == [(0, BASE + 2_500)]  # max 1
    assert index.next_due == BASE + 5_000  # the one left over is due: call again


def test_duplicates_are_read_once_and_emptied_slots_go_after_the_checkpoint(
        tmp_path: Path) -> None:
    index = TimerIndex(tmp_path)
    live = {7: BASE + 10}
    index.add(7, BASE + 10)
    index.add(7, BASE + 10)  # a re-dispatch after a crash
    assert index.due(BASE + SLOT_MS, 10, _codes(live)) == [(7, BASE + 10)]
    live[7] = -1
    index.due(BASE + SLOT_MS, 10, _codes(live))
    assert list(index.slots()) == [BASE // SLOT_MS]
    assert index.take_unlinks() == []  # not confirmed: kept
    index.due(BASE + SLOT_MS, 10, _codes(live))
    index.confirm()
    assert list(index.slots()) == [BASE // SLOT_MS]  # still there until the flush
    index.unlink(index.take_unlinks())
    assert list(index.slots()) == []
    assert index.next_due == NO_TIMER
    index.add(8, BASE + 20)  # late: into the first slot not retired
    assert list(index.slots()) == [BASE // SLOT_MS + 1]


def test_a_new_earlier_timer_wakes_a_waiting_hand_over(tmp_path: Path) -> None:
    index = TimerIndex(tmp_path)
    index.add(0, BASE + 5_000)
    index.wake.clear()
    index.add(1, BASE + 9_000)
    assert not index.wake.is_set()
    index.add(2, BASE + 1_000)
    assert index.wake.is_set() and index.next_due == BASE + 1_000


class _Files:
    """Counts the directory listings and file opens of the timer index (real files)."""

    def __init__(self) -> None:
        self.listings = 0
        self.opens = 0


def _counting(monkeypatch, files: _Files) -> None:  # type: ignore[no-untyped-def]
    import builtins
    import os

    from clepsydra_store.engine.index import timer_index

    listdir, open_ = os.listdir, builtins.open

    def counted_listdir(path):  # type: ignore[no-untyped-def]
        files.listings += 1
        return listdir(path)

    def counted_open(*args, **kwargs):  # type: ignore[no-untyped-def]
        files.opens += 1
        return open_(*args, **kwargs)

    monkeypatch.setattr(timer_index.os, "listdir", counted_listdir)
    monkeypatch.setattr(timer_index, "open", counted_open, raising=False)


def test_a_hand_over_with_nothing_new_lists_no_directory_and_opens_no_slot_file(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # in the steady state a call came every ~2 ms and listed the slot directories
    # and opened, read and closed the current slot file each time; the index now keeps the
    # list of slots and reads a slot file again only when add() appended to it
    index = TimerIndex(tmp_path)
    live = {q: BASE + 10 * q for q in range(90)}  # one slot
    for q, ts in live.items():
        index.add(q, ts)
    files = _Files()
    _counting(monkeypatch, files)
    assert index.due(BASE + 5, 10, _codes(live)) == [(0, BASE)]
    index.confirm()
    first = (files.listings, files.opens)
    for now in range(BASE + 5, BASE + 9):
        assert index.due(now, 10, _codes(live)) == []
        index.confirm()
    assert (files.listings, files.opens) == first  # nothing new: no system call of its own
    live[90] = BASE + 15
    index.add(90, BASE + 15)  # appended to the slot read: read again, once
    live[91] = BASE + 3 * SLOT_MS + 1
    index.add(91, BASE + 3 * SLOT_MS + 1)  # a new slot: known without a listing
    assert index.due(BASE + 15, 10, _codes(live)) == [(1, BASE + 10), (90, BASE + 15)]
    assert files.listings == first[0] and files.opens == first[1] + 1
    assert list(index.slots()) == [BASE // SLOT_MS, BASE // SLOT_MS + 3]
    reopened = TimerIndex(tmp_path)  # a restart lists the directories once
    assert list(reopened.slots()) == [BASE // SLOT_MS, BASE // SLOT_MS + 3]


def test_next_due_is_known_only_after_a_confirmed_due(tmp_path: Path) -> None:
    # a hand-over call skips its run while now < next_due, so next_due must be a
    # lower bound of every pending timer: not after a restart (pairs no add() saw), not
    # between due() and confirm() (taken pairs whose hand-over may still fail)
    index = TimerIndex(tmp_path)
    live = {0: BASE + 100, 1: BASE + 200}
    for q, ts in live.items():
        index.add(q, ts)
    assert index.known_next_due is None
    assert index.due(BASE + 100, 10, _codes(live)) == [(0, BASE + 100)]
    assert index.known_next_due is None and index.next_due == BASE + 200
    index.confirm()
    assert index.known_next_due == index.next_due == BASE + 200
    index.add(2, BASE + 150)  # earlier: lowers the bound, wakes a waiting call
    assert index.known_next_due == BASE + 150 and index.wake.is_set()
    assert TimerIndex(tmp_path).known_next_due is None  # a restart


def test_slots_across_hours_stay_right_with_a_few_hours_listed_in_memory(
        tmp_path: Path) -> None:
    # the listings kept in memory are a few hours' (memory bounded however far ahead
    # timers are); an hour walked again, or added to after its listing was dropped, is right
    hour_slots = 3_600_000 // SLOT_MS
    index = TimerIndex(tmp_path)
    first = BASE // SLOT_MS
    wanted = [first + h * hour_slots + k for h in range(5) for k in (0, 7)]
    for q, slot in enumerate(wanted):
        index.add(q, slot * SLOT_MS)
    assert list(index.slots()) == wanted  # five hours walked, two kept listed
    late = first + 1 * hour_slots + 3  # an hour whose listing was dropped
    index.add(99, late * SLOT_MS)
    assert list(index.slots()) == sorted([*wanted, late])
    assert list(index.slots(first + 2 * hour_slots + 1)) == sorted(
        s for s in [*wanted, late] if s > first + 2 * hour_slots)
    assert list(TimerIndex(tmp_path).slots()) == sorted([*wanted, late])


def _fsyncs_of_files(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The fds of the files (not directories) ``os.fsync`` is called on from now."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            synced.append(fd)
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_timers_for_more_seconds_than_open_files_cost_no_fsync_until_the_flush(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # DEC-timer-slot-evict: a timer for a 65th second evicts a slot file; its fsync waits for
    # the flush (before the checkpoint), which then closes it: no fsync under the writer lock
    index = TimerIndex(tmp_path)
    synced = _fsyncs_of_files(monkeypatch)
    seconds = 3 * timer_index._OPEN_FILES
    live = {q: BASE + q * SLOT_MS for q in range(seconds)}  # one timer a second
    open_before = len(os.listdir("/proc/self/fd"))
    for q, ts in live.items():
        index.add(q, ts)
    assert synced == []  # the writer's path fsyncs nothing
    assert len(os.listdir("/proc/self/fd")) - open_before == seconds  # evicted ones wait
    index.fsync()  # the flush
    assert len(synced) == seconds  # every file written: 128 evicted, 64 open
    assert len(os.listdir("/proc/self/fd")) - open_before == timer_index._OPEN_FILES
    index.close()
    reopened = TimerIndex(tmp_path)  # every pair on disk (SPEC T1)
    assert reopened.due(BASE + seconds * SLOT_MS, 2 * seconds, _codes(live)) == sorted(
        live.items(), key=lambda pair: pair[1])


def test_past_the_bound_of_files_waiting_for_the_flush_the_writer_fsyncs_itself(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(timer_index, "_CLOSING_FILES", 2)
    index = TimerIndex(tmp_path)
    synced = _fsyncs_of_files(monkeypatch)
    open_before = len(os.listdir("/proc/self/fd"))
    for q in range(timer_index._OPEN_FILES + 5):
        index.add(q, BASE + q * SLOT_MS)
    assert len(synced) == 3  # 5 evicted: 2 wait for the flush, 3 fsync'd and closed at once
    assert len(os.listdir("/proc/self/fd")) - open_before == timer_index._OPEN_FILES + 2
    index.close()
    assert len(os.listdir("/proc/self/fd")) == open_before
