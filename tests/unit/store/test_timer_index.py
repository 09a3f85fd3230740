"""The timer index alone (issue 15): slot files, order, duplicates, stale pairs, emptied slots
unlinked only after confirmation and the checkpoint's flush; a fake clock (every call is
given its ``now``)."""

from __future__ import annotations

from pathlib import Path

from clepsydra_store.engine.timer_index import NO_TIMER, SLOT_MS, TimerIndex

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
