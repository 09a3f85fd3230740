"""Timer messages in the engine (SPEC T1, T2): exact delivery times through the timer
index, never early, once; cancel and reschedule (level and timer messages), durable across a
reopen and a kill; the cap; carry-forward past retention. Time is a virtual clock: every
hand-over is given its ``now``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import AlreadyDelivered, Fenced, MessageNotFound, ValidationError
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest
from tests.helpers import now_ms
from tests.unit.store.conftest import OpenStore, engine_config

TOPIC = "orders"
DAY_MS = 86_400_000



def _store(open_store: OpenStore, **overrides: object) -> MessageStore:
    store = open_store(**overrides)
    store.create_topic(TOPIC, 2)
    return store


def _bodies(store: MessageStore) -> list[bytes]:
    out: list[bytes] = []
    for queue_id in range(2):
        out += [m.body for m in store.read_queue(TOPIC, queue_id, 0, 1000).messages]
    return sorted(out)


def test_a_timer_is_delivered_at_its_time_never_before_and_once(open_store: OpenStore) -> None:
    # SPEC T1, T2: never early, on time, once
    store = _store(open_store)
    base = now_ms()
    answers = store.put_batch([
        PutRequest(TOPIC, b"late", deliver_at=base + 5_000, keys="k1"),
        PutRequest(TOPIC, b"soon", delay_ms=2_000),
    ])
    assert {a.topic for a in answers} == {naming.TIMER_TOPIC}
    assert store._timers.handover(base + 1_000, 100).delivered == 0
    first = store._timers.handover(answers[1].store_timestamp + 2_000, 100)
    assert first.delivered == 1 and _bodies(store) == [b"soon"]
    assert first.next_due_at == base + 5_000
    assert store._timers.handover(base + 4_999, 100).delivered == 0
    second = store._timers.handover(base + 5_000, 100)
    assert second.delivered == 1  # (lateness: against the real clock, not this virtual one)
    assert store._timers.handover(base + 60_000, 100).delivered == 0  # once
    assert _bodies(store) == [b"late", b"soon"]
    delivered = store.get_by_msg_id(answers[0].msg_id)[-1]
    assert delivered.topic == TOPIC
    assert delivered.properties[P.DELIVER_TS] == str(base + 5_000)  # analytics' intended time
    assert delivered.properties[P.SCHEDULE_OFFSET] == "0:0"
    assert P.DELIVER_AT not in delivered.properties


def test_due_timers_go_earliest_first_whatever_their_arrival(open_store: OpenStore) -> None:
    store = _store(open_store)
    base = now_ms() + 10_000
    store.put_batch([PutRequest(TOPIC, str(i).encode(), deliver_at=base + (7 - i) * 300,
                                queue_id=0) for i in range(8)])
    assert store._timers.handover(base + 10_000, 100).delivered == 8
    order = [m.body for m in store.read_queue(TOPIC, 0, 0, 100).messages]
    assert order == [str(i).encode() for i in reversed(range(8))]


def test_a_time_in_the_past_delivers_now(open_store: OpenStore) -> None:
    # SPEC T1: "a time in the past delivers now"
    store = _store(open_store)
    answer = store.put(PutRequest(TOPIC, b"x", deliver_at=1_000))
    result = store._timers.handover(answer.store_timestamp, 10)
    assert result.delivered == 1 and result.lateness_ms[0] >= 0


def test_the_cap_is_a_setting_and_its_400_names_it(open_store: OpenStore) -> None:
    # SPEC T1: at the cap accepted, just past refused naming the setting and limit
    store = _store(open_store, timer_max_delay_ms=30 * DAY_MS)
    store.put(PutRequest(TOPIC, b"ok", delay_ms=30 * DAY_MS))
    with pytest.raises(ValidationError) as caught:
        store.put(PutRequest(TOPIC, b"no", delay_ms=30 * DAY_MS + 1))
    assert "CLEPSYDRA_TIMER_MAX_DELAY" in str(caught.value) and "30d" in str(caught.value)
    with pytest.raises(ValidationError):
        store.put(PutRequest(TOPIC, b"no", deliver_at=now_ms() + 31 * DAY_MS))


def test_cancel_a_timer_and_a_level_message(open_store: OpenStore) -> None:
    # SPEC T1: a cancelled message is never delivered; a second cancel answers cancelled
    store = _store(open_store, levels="1s 2s")
    timer = store.put(PutRequest(TOPIC, b"t", delay_ms=1_000))
    level = store.put(PutRequest(TOPIC, b"l", delay_level=1))
    kept = store.put(PutRequest(TOPIC, b"kept", delay_level=1))
    assert store._timers.cancel(timer.msg_id).status == "cancelled"
    assert store._timers.cancel(level.msg_id).msg_ids == [level.msg_id]
    assert store._timers.cancel(timer.msg_id).status == "cancelled"  # idempotent
    later = now_ms() + 10_000
    assert store._timers.handover(later, 10).delivered == 0
    handed = store.handover(1, 0, 10, now_ms=later)
    assert handed.delivered == 1
    assert _bodies(store) == [b"kept"]
    with pytest.raises(AlreadyDelivered):
        store._timers.cancel(kept.msg_id)
    with pytest.raises(MessageNotFound):
        store._timers.reschedule(timer.msg_id, later)  # cancelled: nothing to reschedule
    with pytest.raises(MessageNotFound):
        store._timers.cancel("0" * 32)


def test_a_plain_message_is_already_delivered(open_store: OpenStore) -> None:
    store = _store(open_store)
    plain = store.put(PutRequest(TOPIC, b"p"))
    with pytest.raises(AlreadyDelivered):
        store._timers.cancel(plain.msg_id)


def test_reschedule_keeps_the_msg_id_and_a_level_message_becomes_a_timer(
        open_store: OpenStore) -> None:
    # SPEC T1: reschedule by msgId; the level entry is passed over, the timer delivers
    store = _store(open_store, levels="1s 2s")
    level = store.put(PutRequest(TOPIC, b"l", delay_level=2, keys="order-7"))
    at = now_ms() + 60_000
    outcome = store._timers.reschedule(level.msg_id, at)
    assert outcome.status == "rescheduled" and outcome.deliver_at == at
    assert store.handover(2, 0, 10, now_ms=at).delivered == 0  # the level entry: cancelled
    assert store.schedule_entries(2, 0, 1).handed_over == 0  # passed over
    assert store._timers.handover(at - 1, 10).delivered == 0
    assert store._timers.handover(at, 10).delivered == 1
    copies = store.get_by_msg_id(level.msg_id)
    assert copies[-1].topic == TOPIC and copies[-1].msg_id == level.msg_id
    assert store.get_by_key(TOPIC, "order-7")[0].body == b"l"


def test_by_key_acts_on_every_pending_message_of_the_topic(open_store: OpenStore) -> None:
    store = _store(open_store)
    store.create_topic("other", 1)
    a = store.put(PutRequest(TOPIC, b"a", delay_ms=5_000, keys="cart-1"))
    b = store.put(PutRequest(TOPIC, b"b", delay_ms=6_000, keys="cart-1 x"))
    store.put(PutRequest("other", b"c", delay_ms=6_000, keys="cart-1"))
    copies = store._timers.copies_by_key(TOPIC, "cart-1")
    assert set(copies) == {a.msg_id, b.msg_id}
    outcome = store._timers.act(copies, now_ms() + 100_000)
    assert sorted(outcome.msg_ids) == sorted([a.msg_id, b.msg_id])
    later = now_ms() + 20_000
    assert store._timers.handover(later, 10).delivered == 1  # only "other"'s
    assert store._timers.handover(now_ms() + 100_000, 10).delivered == 2
    with pytest.raises(AlreadyDelivered):
        store._timers.act(store._timers.copies_by_key(TOPIC, "cart-1"), None)


def test_cancel_and_timers_survive_a_reopen(open_store: OpenStore) -> None:
    # SPEC T2: survives restarts; a cancel is durable
    store = _store(open_store)
    base = now_ms() + 50_000
    keep = store.put(PutRequest(TOPIC, b"keep", deliver_at=base))
    gone = store.put(PutRequest(TOPIC, b"gone", deliver_at=base))
    store._timers.cancel(gone.msg_id)
    store.close()
    again = open_store()
    assert again._timers.handover(base, 10).delivered == 1
    assert again.get_by_msg_id(keep.msg_id)[-1].topic == TOPIC
    again.close()
    third = open_store()
    assert third._timers.handover(base + 1, 10).delivered == 0  # once, across reopens


def test_a_hand_over_copy_replayed_after_kill_writes_nothing_twice(tmp_path: Path) -> None:
    # SPEC T2 / D9: the child parks timers, hands them over and is killed -9 before any
    # checkpoint; the reopened store re-derives from the CommitLog what was handed over
    data = tmp_path / "data"
    script = tmp_path / "child.py"
    script.write_text(f"""
import os, time
from pathlib import Path
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import engine_config
store = MessageStore(engine_config(Path({str(data)!r}), flush_interval_ms=3_600_000))
store.create_topic("orders", 1)
now = time.time_ns() // 1_000_000
store.put_batch([PutRequest("orders", b"x%d" % i, deliver_at=now + i) for i in range(50)])
r = store._timers.handover(now + 24, 1000)
print(r.delivered, flush=True)
os.kill(os.getpid(), 9)
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=os.getcwd(), timeout=60)
    assert done.returncode == -9, done.stderr
    assert done.stdout.split() == ["25"]
    store = MessageStore(engine_config(data))
    try:
        assert store._timers.handover(now_ms() + 1_000, 1000).delivered == 25
        assert store.read_queue(TOPIC, 0, 0, 1000).max_offset == 50
        assert len({m.body for m in store.read_queue(TOPIC, 0, 0, 1000).messages}) == 50
    finally:
        store.close()


def test_a_year_ahead_timer_is_carried_past_retention(open_store: OpenStore) -> None:
    # SPEC P4, T1: a timer due after retention is carried forward, never lost
    store = _store(open_store, retention_hours=0.01)
    far = now_ms() + 300 * DAY_MS
    timer = store.put(PutRequest(TOPIC, b"far", deliver_at=far, keys="year"))
    cancelled = store.put(PutRequest(TOPIC, b"never", deliver_at=far))
    store._timers.cancel(cancelled.msg_id)
    filler = b"f" * 4000
    for _ in range(40):  # several segments of 64 KiB
        store.put_batch([PutRequest(TOPIC, filler) for _ in range(4)])
    deleted = store.delete_expired_segments(now_ms=now_ms() + 3_600_000)
    assert deleted > 0
    assert store.stats()["schedule_carried_total"] == 1  # the cancelled one is not carried
    result = store._timers.handover(far, 10)
    assert result.delivered == 1
    assert store.get_by_msg_id(timer.msg_id)[-1].body == b"far"


def test_backlog_by_hour_ahead(open_store: OpenStore) -> None:
    store = _store(open_store)
    now = now_ms()
    store.put_batch([PutRequest(TOPIC, b"a", delay_ms=1_000),
                     PutRequest(TOPIC, b"b", delay_ms=2 * 3_600_000 + 5_000),
                     PutRequest(TOPIC, b"c", delay_ms=2 * 3_600_000 + 9_000)])
    backlog = store._timers.backlog(now)
    assert backlog.pending == 3
    assert [(h.hour, h.count) for h in backlog.by_hour_ahead] == [(0, 1), (2, 2)]
    assert backlog.lateness is None
    store._timers.handover(now + 5_000, 10)
    after = store._timers.backlog(now + 5_000)
    assert after.pending == 2 and after.handed_over == 1 and after.lateness is not None
    assert store.stats()["timer_handed_over_total"] == 1  # /metrics


def test_torn_timer_copy_under_a_later_checkpoint_is_handed_over_again(
        open_store: OpenStore) -> None:
    # SPEC T2: the checkpoint (and the handed-over sentinels it covers) counts
    # a copy the CommitLog lost; the reopened store hands that timer over again, once
    store = _store(open_store)
    at = now_ms() - 10
    store.put_batch([PutRequest(TOPIC, b"m%d" % i, deliver_at=at, queue_id=0)
                     for i in range(5)])
    assert store._timers.handover(now_ms(), 10).delivered == 5
    copies = store.read_queue(TOPIC, 0, 0, 10).messages
    store.close()  # checkpoint after every copy; the sentinels are in the timer log's file
    last = sorted((store.config.data_dir / naming.COMMITLOG_DIR).iterdir())[-1]
    with open(last, "r+b") as f:
        f.truncate(copies[-1].commitlog_offset - int(last.name) + 10)
    store = open_store()
    assert store._timers.backlog(now_ms()).pending == 1
    assert store._timers.handover(now_ms(), 10).delivered == 1
    bodies = [m.body for m in store.read_queue(TOPIC, 0, 0, 10).messages]
    assert sorted(bodies) == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # each exactly once
    store.close()
    store = open_store()
    assert store._timers.handover(now_ms(), 10).delivered == 0


def test_a_thirty_day_timer_under_a_virtual_clock(open_store: OpenStore) -> None:
    # SPEC T1 ("max delay at least 30 days"): not a day early, then once
    store = _store(open_store)
    answer = store.put(PutRequest(TOPIC, b"month", delay_ms=30 * DAY_MS))
    due = answer.store_timestamp + 30 * DAY_MS
    for day in range(30):
        assert store._timers.handover(answer.store_timestamp + day * DAY_MS, 10).delivered == 0
    assert store._timers.handover(due - 1, 10).delivered == 0
    assert store._timers.handover(due, 10).delivered == 1
    assert store._timers.handover(due + DAY_MS, 10).delivered == 0


def test_hand_overs_racing_the_flush_deliver_each_timer_once(open_store: OpenStore) -> None:
    # SPEC T2 / D9: the flush writes handed-over sentinels into the timer log while
    # hand-overs read it; a reader that looked at the file before the sentinels could see
    # neither and hand a timer over twice (bench/timers.py found it). Small batches, a flush
    # thread at full speed: every timer arrives once.
    store = _store(open_store, flush_interval_ms=1)
    n = 3_000
    store.put_batch([PutRequest(TOPIC, b"%d" % i, deliver_at=1, queue_id=0) for i in range(n)])
    stop = threading.Event()

    def flush() -> None:
        while not stop.is_set():
            store.flush()

    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        delivered = 0
        while delivered < n:
            got = store._timers.handover(now_ms(), 7).delivered
            assert got, "a due timer was not handed over"
            delivered += got
    finally:
        stop.set()
        flusher.join()
    assert store._timers.handover(now_ms(), 1000).delivered == 0
    assert store.read_queue(TOPIC, 0, 0, 1).max_offset == n


def test_a_cancel_survives_kill_9_before_any_flush(tmp_path: Path) -> None:
    # SPEC T1: "a cancelled message is never delivered, even across a crash at any moment":
    # the child cancels (and reschedules) and is killed -9 before any flush or checkpoint
    data = tmp_path / "data"
    script = tmp_path / "child.py"
    script.write_text(f"""
import os
from pathlib import Path
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import engine_config
store = MessageStore(engine_config(Path({str(data)!r}), flush_interval_ms=3_600_000))
store.create_topic("orders", 1)
r = store.put_batch([PutRequest("orders", b"m%d" % i, delay_ms=600_000) for i in range(10)])
for a in r[:5]:
    store._timers.cancel(a.msg_id)
store._timers.reschedule(r[5].msg_id, 1)
print(r[5].msg_id, flush=True)
os.kill(os.getpid(), 9)
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=os.getcwd(), timeout=60)
    assert done.returncode == -9, done.stderr
    moved = done.stdout.split()[0]
    store = MessageStore(engine_config(data))
    try:
        assert store._timers.handover(now_ms(), 100).delivered == 1  # the rescheduled one, now
        assert store.get_by_msg_id(moved)[-1].topic == TOPIC
        assert store._timers.handover(now_ms() + 700_000, 100).delivered == 4  # not the 5
        bodies = sorted(m.body for m in store.read_queue(TOPIC, 0, 0, 100).messages)
        assert bodies == [b"m5", b"m6", b"m7", b"m8", b"m9"]
    finally:
        store.close()


def test_reschedules_racing_the_hand_over_deliver_each_message_once(
        open_store: OpenStore) -> None:
    # SPEC T1: a reschedule racing the hand-over: 200 (delivered later, from the new timer)
    # or 409 ALREADY_DELIVERED (delivered from the first one); never both, never neither
    store = _store(open_store)
    n = 400
    results = store.put_batch([PutRequest(TOPIC, b"%d" % i, deliver_at=1, queue_id=0)
                               for i in range(n)])
    answers: dict[str, str] = {}

    def reschedule() -> None:
        for r in results:
            try:
                store._timers.reschedule(r.msg_id, 2)  # still due: delivered by the next call
                answers[r.msg_id] = "rescheduled"
            except AlreadyDelivered:
                answers[r.msg_id] = "delivered"

    racer = threading.Thread(target=reschedule)
    racer.start()
    while racer.is_alive():
        store._timers.handover(now_ms(), 3)
    racer.join()
    while store._timers.handover(now_ms(), 1000).delivered:
        pass
    copies = store.read_queue(TOPIC, 0, 0, 1000).messages
    assert len(copies) == n and len({m.msg_id for m in copies}) == n  # each once
    assert set(answers.values()) <= {"rescheduled", "delivered"} and len(answers) == n
    for m in copies:
        first_entry = m.properties[P.SCHEDULE_OFFSET] == f"0:{int(m.body)}"
        assert first_entry == (answers[m.msg_id] == "delivered"), m.msg_id


def test_a_waiting_hand_over_runs_only_when_something_can_be_due(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC T1, DEC-timer-handover-gap: while timers fall due a call came every ~2 ms and ran the
    # hand-over (writer lock, the index, the codes) on arrival and again after each wait, with a 1
    # ms floor; now a call runs it only once the index's known next due time has come (an earlier
    # timer added wakes the wait), and it waits until that millisecond, never early
    store = _store(open_store)
    runs: list[int] = []
    handover = store._timers.handover

    def counted(now_ms: int, max_count: int, fence: int | None = None):  # type: ignore[no-untyped-def]
        runs.append(now_ms)
        return handover(now_ms, max_count, fence)

    monkeypatch.setattr(store._timers, "handover", counted)
    assert store._timers.handover_wait(10, 20, now_ms).delivered == 0
    assert len(runs) == 1  # the first: nothing known yet (a restart leaves pairs on disk)
    assert store._timers.handover_wait(10, 20, now_ms).delivered == 0
    assert len(runs) == 1  # known: no timer at all; the wait ran nothing
    base = now_ms()
    store.put_batch([PutRequest(TOPIC, b"a", deliver_at=base + 150),
                     PutRequest(TOPIC, b"b", deliver_at=base + 300)])
    for at in (base + 150, base + 300):
        result = store._timers.handover_wait(10, 5_000, now_ms)
        assert result.delivered == 1 and min(result.lateness_ms) >= 0  # never early
        assert runs[-1] >= at
    assert len(runs) == 3  # one run a timer, none on arrival or at a wake before its time


def test_a_waiting_hand_over_comes_no_sooner_than_the_gap_after_the_last(
        open_store: OpenStore) -> None:
    # SPEC T1, DEC-timer-handover-gap: under a steady stream of due timers the scheduler called
    # ~530 times a second, each call handing over ~2 timers at ~0.4 ms of the one writer's CPU; a
    # run that returns timers now comes at least timer_handover_gap_ms after the last one that did
    # (a first timer, or one after a quiet spell, at its own millisecond); never early
    store = _store(open_store, timer_handover_gap_ms=60_000)
    store.put_batch([PutRequest(TOPIC, b"a", deliver_at=now_ms() + 20)])
    first = store._timers.handover_wait(10, 5_000, now_ms)
    assert first.delivered == 1 and min(first.lateness_ms) >= 0
    due = now_ms() + 20
    store.put_batch([PutRequest(TOPIC, b"b", deliver_at=due)])
    held = store._timers.handover_wait(10, 200, now_ms)  # b falls due in the wait: held back
    assert held.delivered == 0 and held.next_due_at == due
    assert store._timers.handover(now_ms(), 10).delivered == 1  # b was pending all along
    assert _bodies(store) == [b"a", b"b"]

    store.close()
    eager = open_store(timer_handover_gap_ms=0)  # the same files, no gap
    eager.put_batch([PutRequest(TOPIC, b"c", deliver_at=now_ms() + 20)])
    assert eager._timers.handover_wait(10, 5_000, now_ms).delivered == 1
    eager.put_batch([PutRequest(TOPIC, b"d", deliver_at=now_ms() + 20)])
    assert eager._timers.handover_wait(10, 5_000, now_ms).delivered == 1

    # a full batch leaves more due: the next call takes it at once (a backlog drains at full
    # speed whatever the gap)
    eager.close()
    drain = open_store(timer_handover_gap_ms=60_000)
    due = now_ms() + 20
    drain.put_batch([PutRequest(TOPIC, b"e", deliver_at=due),
                     PutRequest(TOPIC, b"f", deliver_at=due)])
    assert drain._timers.handover_wait(1, 5_000, now_ms).delivered == 1  # a full batch of one
    assert drain._timers.handover_wait(1, 200, now_ms).delivered == 1  # so no gap before f
    assert _bodies(drain) == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_the_hand_over_gap_is_a_store_setting_bounded_by_the_precision_target(
        tmp_path: Path) -> None:
    from clepsydra_core.errors import ConfigError
    from clepsydra_store.settings import StoreSettings

    base = {"CLEPSYDRA_HOME": str(tmp_path)}
    assert StoreSettings.from_env(base).engine.timer_handover_gap_ms == 3
    gap = StoreSettings.from_env({**base, "CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS": "0"})
    assert gap.engine.timer_handover_gap_ms == 0
    with pytest.raises(ConfigError, match="TIMER_HANDOVER_GAP_MS"):
        StoreSettings.from_env({**base, "CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS": "101"})


def test_stopping_the_store_answers_a_waiting_hand_over_at_once(open_store: OpenStore) -> None:
    # graceful stop: the scheduler's hand-over waited out its long poll while the
    # store stopped, then ran on a closed store; now it answers empty at once, as held pulls do
    store = _store(open_store)
    store.put_batch([PutRequest(TOPIC, b"later", deliver_at=now_ms() + 3_600_000)])
    answers: list[int] = []
    waiting = threading.Thread(
        target=lambda: answers.append(store._timers.handover_wait(10, 60_000, now_ms).delivered))
    waiting.start()
    store.release_waits()
    waiting.join(30)  # far less than the wait's 60 s: released, not timed out
    assert not waiting.is_alive() and answers == [0]
    assert store._timers.handover_wait(10, 60_000, now_ms).delivered == 0  # no wait any more
    assert store._timers.backlog(now_ms()).pending == 1  # nothing was handed over or lost


def test_a_timer_hand_over_with_an_older_fencing_token_is_refused_at_once(
        open_store: OpenStore) -> None:
    # SPEC T2, D9, DEC-scheduler-lease: the timers' hand-over is fenced as a level's is; a
    # superseded holder's long poll is refused before it waits
    store = _store(open_store)
    base = now_ms()
    store.put_batch([PutRequest(TOPIC, b"a", deliver_at=base - 10),
                     PutRequest(TOPIC, b"b", deliver_at=base + 60_000)])
    # a time in the past is due at its store time (T1), which may be a millisecond past base
    assert store._timers.handover(now_ms(), 10, fence=7).delivered == 1
    asked: list[int] = []

    def now() -> int:
        asked.append(now_ms())
        return asked[-1]

    with pytest.raises(Fenced, match=r"the timers .* token 6 is older than 7"):
        store._timers.handover_wait(10, 2_000, now, fence=6)
    assert asked == []  # refused before it looked at the clock or waited
    with pytest.raises(Fenced):
        store._timers.handover(base + 60_000, 10, fence=6)
    assert _bodies(store) == [b"a"]
    assert store._timers.handover(base + 60_000, 10, fence=8).delivered == 1
    assert store._fences.newest(1) is None  # the levels' fences are their own
