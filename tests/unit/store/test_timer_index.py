"""The timer index alone (SPEC T1, DEC-timer-slot-files): slot files, order, duplicates, stale
pairs, emptied slots unlinked only after confirmation and the checkpoint's flush; a fake clock
(every call is given its ``now``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

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
    index.add(90, BASE + 15)  # held in memory (DEC-timer-pair-journal): read from there
    live[91] = BASE + 3 * SLOT_MS + 1
    index.add(91, BASE + 3 * SLOT_MS + 1)  # a new slot: known without a listing
    assert index.due(BASE + 15, 10, _codes(live)) == [(1, BASE + 10), (90, BASE + 15)]
    assert files.listings == first[0] and files.opens == first[1]
    assert list(index.slots()) == [BASE // SLOT_MS, BASE // SLOT_MS + 3]
    index.make_durable(index.take())  # the flush: the pairs in the journal
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
    index.make_durable(index.take())  # the flush: the pairs in the journal
    assert list(TimerIndex(tmp_path).slots()) == sorted([*wanted, late])


def _opens_and_fsyncs(monkeypatch) -> tuple[list[str], list[int]]:  # type: ignore[no-untyped-def]
    """The paths ``os.open`` opens and the fds of the files (not directories) ``os.fsync`` is
    called on, from now (spies on the real calls)."""
    opened: list[str] = []
    synced: list[int] = []
    real_open, real_fsync = os.open, os.fsync

    def open_(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            synced.append(fd)
        real_fsync(fd)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    return opened, synced


def test_timers_for_many_seconds_open_no_slot_file_until_a_spill(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # DEC-timer-pair-journal: a timer for a 65th distinct second opened (and evicted) a slot
    # file, an open and a close a timer; now a timer opens nothing, a flush writes and fsyncs
    # one file (the journal), and a reopen reads every pair back from it (SPEC T1, P3)
    index = TimerIndex(tmp_path)
    opened, synced = _opens_and_fsyncs(monkeypatch)
    seconds = 3_000
    live = {q: BASE + (q * 7 % seconds) * SLOT_MS + q % 10 for q in range(2 * seconds)}
    for q, ts in live.items():
        index.add(q, ts)
    assert opened == [] and synced == []  # the writer's path: no open, no fsync
    index.make_durable(index.take())  # a flush
    assert opened == [] and len(synced) == 1  # the journal: already open, one fsync
    assert not [n for n in os.listdir(tmp_path) if n.isdigit()]  # no slot file yet
    index.close()
    reopened = TimerIndex(tmp_path)  # a restart: every pair back, from the journal
    assert reopened.due(BASE + seconds * SLOT_MS, 3 * seconds, _codes(live)) == sorted(
        live.items(), key=lambda pair: (pair[1], pair[0]))


def test_a_spill_writes_a_slot_file_once_a_slot_and_empties_the_journal(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # DEC-timer-pair-journal: past SPILL_PAIRS held pairs a flush spreads them into their slot
    # files (an open a slot, not a timer), then the journal holds nothing more
    monkeypatch.setattr(timer_index, "SPILL_PAIRS", 1_000)
    index = TimerIndex(tmp_path)
    seconds = 200
    live = {q: BASE + (q % seconds) * SLOT_MS + q for q in range(1_000)}  # 5 pairs a slot
    for q, ts in list(live.items())[:500]:
        index.add(q, ts)
    index.make_durable(index.take())  # below the bound: the journal only
    opened, _ = _opens_and_fsyncs(monkeypatch)
    for q, ts in list(live.items())[500:]:
        index.add(q, ts)
    assert index.due(BASE, 10, _codes(live)) == [(0, BASE)]  # read from memory
    index.confirm()
    del live[0]  # handed over
    index.make_durable(index.take())  # 1,000 held: spread, by a thread of its own
    assert (tmp_path / timer_index.SPILLING_NAME).exists() or index.spills == 1
    assert index.due(BASE + SLOT_MS - 1, 10, _codes(live)) == [  # the spilling pairs read
        (q, BASE + q) for q in (200, 400, 600, 800)]
    index.wait_spill()
    assert not (tmp_path / timer_index.SPILLING_NAME).exists()
    slot_files = [p for p in opened if Path(p).parent.name.isdigit()]  # <hour>/<second>
    assert len(slot_files) == len(set(slot_files)) == seconds  # once a slot
    assert index.spills == 1
    journal = tmp_path / timer_index.JOURNAL_NAME
    assert journal.stat().st_size == timer_index.JOURNAL_HEADER.size
    index.add(5_000, BASE + 7 * SLOT_MS + 1)  # held again, beside the slot file
    live[5_000] = BASE + 7 * SLOT_MS + 1
    want = sorted(live.items(), key=lambda pair: (pair[1], pair[0]))
    assert index.due(BASE + seconds * SLOT_MS, 2_000, _codes(live)) == want
    index.make_durable(index.take())
    index.close()
    assert TimerIndex(tmp_path).due(BASE + seconds * SLOT_MS, 2_000, _codes(live)) == want


def test_a_torn_journal_tail_is_cut_and_an_unknown_format_refused(tmp_path: Path) -> None:
    # a flush cut short leaves part of a pair (no checkpoint covers it); a journal of a
    # format this store does not know is refused rather than read wrong (versioned formats)
    index = TimerIndex(tmp_path)
    index.add(1, BASE + 10)
    index.add(2, BASE + 20)
    index.make_durable(index.take())
    index.close()
    journal = tmp_path / timer_index.JOURNAL_NAME
    with open(journal, "ab") as f:
        f.write(b"\x01\x02\x03")
    live = {1: BASE + 10, 2: BASE + 20}
    assert TimerIndex(tmp_path).due(BASE + SLOT_MS, 10, _codes(live)) == sorted(live.items())
    assert journal.stat().st_size == timer_index.JOURNAL_HEADER.size + 2 * timer_index.PAIR.size
    journal.write_bytes(timer_index.JOURNAL_HEADER.pack(b"CTPJ", 99))
    with pytest.raises(ValueError, match="v99 unknown"):
        TimerIndex(tmp_path)


def test_slot_files_of_a_store_from_before_the_journal_still_read(tmp_path: Path) -> None:
    # versioned formats: a store written before DEC-timer-pair-journal has slot files and no
    # journal; its pairs read as they did
    slot = BASE // SLOT_MS
    hour_dir = tmp_path / f"{slot * SLOT_MS // 3_600_000:08d}"
    hour_dir.mkdir(parents=True)
    (hour_dir / f"{slot:012d}").write_bytes(
        timer_index.PAIR.pack(3, BASE + 30) + timer_index.PAIR.pack(4, BASE + 5))
    live = {3: BASE + 30, 4: BASE + 5}
    index = TimerIndex(tmp_path)
    assert index.due(BASE + SLOT_MS, 10, _codes(live)) == [(4, BASE + 5), (3, BASE + 30)]
