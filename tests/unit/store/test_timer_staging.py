"""Timer copies made before their timers fall due (DEC-timer-staging; SPEC T1, T2, D4, D7, D9):
the copies a hand-over takes from what was made ahead are the copies it makes itself; nothing is
written or delivered ahead; a timer cancelled, rescheduled or left without its topic after its
copy was made is handed over (or not) exactly as without the copy. Time is a virtual clock:
every walk and hand-over is given its ``now``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.schedule.staging import STAGE_STEP_MS
from clepsydra_store.engine.types import PutRequest
from tests.helpers import now_ms
from tests.unit.store.conftest import OpenStore

TOPIC = "orders"
OTHER = "audit"
AHEAD_MS = 2_000


def _store(open_store: OpenStore, **overrides: Any) -> MessageStore:
    store = open_store(**overrides)
    store.create_topic(TOPIC, 2)
    store.create_topic(OTHER, 1)
    return store


def _views(store: MessageStore, topic: str = TOPIC, queues: int = 2) -> list[tuple[Any, ...]]:
    """What a consumer sees of each copy but its place and store time: body, queue, properties
    (the msgId's and trace's values made equal across stores), reconsume times, born time."""
    out = []
    for queue_id in range(queues):
        for m in store.read_queue(topic, queue_id, 0, 1000).messages:
            props = dict(m.properties)
            props[P.UNIQ_KEY] = "-"
            out.append((m.body, m.queue_id, sorted(props.items()), m.reconsume_times,
                        m.born_timestamp, m.flag, m.sys_flag))
    return sorted(out)


def _timers(store: MessageStore, due: int, n: int = 40) -> list[str]:
    answers = store.put_batch([
        PutRequest(TOPIC if i % 4 else OTHER, f"m{i}".encode(), deliver_at=due + i % 3,
                   born_timestamp=1_700_000_000_000 + i, tags=f"t{i % 2}",
                   keys=f"k{i}", queue_id=None if i % 4 else 0,
                   properties={"app": "x" * (i % 5)})
        for i in range(n)])
    return [a.msg_id for a in answers]


def test_copies_made_ahead_are_the_copies_the_hand_over_makes(open_store: OpenStore,
                                                              tmp_path: Path) -> None:
    # SPEC D4, T1, DEC-timer-staging: the same timers through a store that makes their copies
    # ahead and one that does not (ahead 0) give the same copies, none before its time
    due = now_ms() + 60_000
    ahead = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    _timers(ahead, due)
    ahead._handover.stage_timers(due - 1_000)
    staging = ahead._handover.staging
    assert staging.made == len(staging) == 40
    assert _views(ahead) == [] and _views(ahead, OTHER, 1) == []  # nothing written or delivered
    assert ahead._timers.handover(due - 1, 100).delivered == 0  # T1: not early
    result = ahead._timers.handover(due + 5, 100)
    assert result.delivered == 40 and staging.used == 40 and len(staging) == 0

    plain = MessageStore(replace(ahead.config, data_dir=tmp_path / "plain",
                                 timer_stage_ahead_ms=0))
    try:
        plain.create_topic(TOPIC, 2)
        plain.create_topic(OTHER, 1)
        _timers(plain, due)
        plain._handover.stage_timers(due - 1_000)
        assert plain._handover.staging.made == 0
        assert plain._timers.handover(due + 5, 100).delivered == 40
        assert _views(ahead) == _views(plain) and len(_views(ahead)) == 30
        assert _views(ahead, OTHER, 1) == _views(plain, OTHER, 1)
    finally:
        plain.close()
    # each copy carries its entry's mark: handed over once (D9)
    assert ahead._timers.handover(due + 60_000, 100).delivered == 0


def test_a_timer_cancelled_or_rescheduled_after_its_copy_was_made(open_store: OpenStore) -> None:
    # SPEC T2, DEC-timer-staging: the copy made ahead is not what decides; the entry's state at
    # the due time is: a cancelled timer is never delivered, a rescheduled one at its new time
    store = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    due = now_ms() + 60_000
    ids = _timers(store, due, 6)
    store._handover.stage_timers(due - 1_000)
    store._timers.cancel(ids[1])
    store._timers.reschedule(ids[2], due + 30_000)
    result = store._timers.handover(due + 5, 100)
    assert result.delivered == 4
    delivered = {m.body for q in range(2) for m in store.read_queue(TOPIC, q, 0, 100).messages}
    assert b"m1" not in delivered and b"m2" not in delivered
    staging = store._handover.staging
    assert len(staging) == 0  # the cancelled one's copy dropped once its time passed
    assert store._timers.handover(due + 29_999, 100).delivered == 0
    later = store._timers.handover(due + 30_000, 100)
    assert later.delivered == 1
    copy = store.get_by_msg_id(ids[2])[-1]
    assert copy.topic == TOPIC and copy.properties[P.DELIVER_TS] == str(due + 30_000)


def test_a_topic_deleted_after_the_copies_were_made_parks_them_as_before(
        open_store: OpenStore) -> None:
    # SPEC D7, DEC-timer-staging: a copy made for a topic deleted since is not used; the
    # hand-over parks the message in %SCHEDULE_ERROR% as it would have without the copy
    store = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    due = now_ms() + 60_000
    _timers(store, due, 8)
    store._handover.stage_timers(due - 1_000)
    assert len(store._handover.staging) == 8
    store.delete_topic(OTHER)
    result = store._timers.handover(due + 5, 100)
    assert result.delivered == 6 and result.parked == 2
    assert store._handover.staging.used == 0
    parked = store.read_queue(naming.SCHEDULE_ERROR_TOPIC, 0, 0, 100).messages
    assert sorted(m.body for m in parked) == [b"m0", b"m4"]
    assert all(m.properties[P.SCHEDULE_ERROR].startswith("real_topic_missing") for m in parked)


def test_the_waiting_call_makes_the_copies_of_what_falls_due_soon(open_store: OpenStore) -> None:
    # DEC-timer-staging: the scheduler's waiting call makes the copies once the next timer is
    # within the window, delivers nothing before its time (T1), then takes them at the due time
    store = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    due = now_ms() + 60_000
    _timers(store, due, 10)
    clock = [due - 5_000]

    def now() -> int:
        return clock[0]

    store._timers.handover_wait(100, 0, now)  # a first call: learns the next due time
    staging = store._handover.staging
    assert staging.made == 0  # 5 s ahead: outside the window
    clock[0] = due - AHEAD_MS + 10
    assert store._timers.handover_wait(100, 0, now).delivered == 0
    assert staging.made == 10 and _views(store) == []
    # the window moved less than a step: not walked again
    clock[0] += STAGE_STEP_MS // 2
    store._timers.handover_wait(100, 0, now)
    assert staging.made == 10
    clock[0] = due + 2
    result = store._timers.handover_wait(100, 0, now)
    assert result.delivered == 10 and staging.used == 10  # (lateness: the real clock's)


def test_a_timer_added_after_the_walk_is_handed_over_all_the_same(open_store: OpenStore) -> None:
    # DEC-timer-staging: the walk moves forward; a timer added behind it has no copy made
    # ahead, and the hand-over makes it then
    store = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    due = now_ms() + 60_000
    _timers(store, due + 100, 4)
    store._handover.stage_timers(due - 1_000)
    store.put_batch([PutRequest(TOPIC, b"late-comer", deliver_at=due)])
    result = store._timers.handover(due + 200, 100)
    assert result.delivered == 5 and store._handover.staging.used == 4
    bodies = [m.body for q in range(2) for m in store.read_queue(TOPIC, q, 0, 100).messages]
    assert b"late-comer" in bodies


def test_making_copies_stops_when_the_first_timer_falls_due(open_store: OpenStore) -> None:
    # SPEC T1, DEC-timer-staging: the waiting call makes copies only while nothing is due; once
    # the clock reaches the next timer's time it stops, and hands over (what is made is kept)
    store = _store(open_store, timer_stage_ahead_ms=AHEAD_MS)
    due = now_ms() + 60_000
    store.put_batch([PutRequest(TOPIC, str(i).encode(), deliver_at=due + i // 2_500)
                     for i in range(5_000)])
    ticks = iter([due - 1_000, due])  # the first chunk before the due time, then it is due

    def clock() -> int:
        return next(ticks, due)

    store._handover.stage_timers(due - 1_000, clock, due)
    staging = store._handover.staging
    assert 0 < staging.made < 5_000  # one chunk (LOCK_CHUNK), then stopped
    result = store._timers.handover(due + 5, 10_000)
    assert result.delivered == 5_000 and staging.used == staging.made
