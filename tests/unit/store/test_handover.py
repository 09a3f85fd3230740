"""Scheduler hand-over through the store (SPEC D3-D9)."""

from __future__ import annotations

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import Fenced
from clepsydra_core.records import tags_code
from clepsydra_store.engine.types import CopyRequest, PutRequest
from tests.unit.store.conftest import OpenStore

LEVELS = "1s 2s 3s"


def test_not_due_entry_is_left_and_due_one_delivered_once(open_store: OpenStore) -> None:
    # SPEC D4, D5, D9
    store = open_store(levels=LEVELS)
    store.create_topic("T", 2)
    parked = store.put(PutRequest("T", b"body", tags="tg", keys="k", queue_id=1, delay_level=2,
                                  flag=5, born_timestamp=11, reconsume_times=4,
                                  properties={P.UNIQ_KEY: "u"}))
    deliver_ts = parked.store_timestamp + 2_000

    early = store.handover(2, 0, 10, now_ms=deliver_ts - 1)
    assert (early.delivered, early.next_offset, early.not_due) == (0, 0, True)
    assert early.next_deliver_ts == deliver_ts
    assert store.get_topic("T").queues[1].max_offset == 0

    due = store.handover(2, 0, 10, now_ms=deliver_ts)
    assert (due.delivered, due.parked, due.skipped, due.next_offset) == (1, 0, 0, 1)
    assert due.handed_over == 0 and not due.not_due and len(due.lateness_ms) == 1
    (record,) = store.read_queue("T", 1, 0, 10).messages
    assert (record.topic, record.queue_id, record.body) == ("T", 1, b"body")
    assert (record.flag, record.born_timestamp, record.reconsume_times) == (5, 11, 4)
    assert P.DELAY not in record.properties
    assert record.properties[P.SCHEDULE_OFFSET] == "2:0"
    assert record.properties[P.DELIVER_TS] == str(deliver_ts)
    assert record.properties[P.TAGS] == "tg"
    assert due.lateness_ms == [record.store_timestamp - deliver_ts]
    entries = store.read_queue("T", 1, 0, 10)
    assert entries.max_offset == 1
    assert {m.topic for m in store.get_by_key("T", "u")} == {"T"}
    assert store.read_queue("T", 1, 0, 1, tags=frozenset({"tg"})).messages == [record]
    assert tags_code("tg") != 0

    replay = store.handover(2, 0, 10, now_ms=deliver_ts + 10)
    assert (replay.delivered, replay.skipped, replay.next_offset) == (0, 1, 1)
    assert store.get_topic("T").queues[1].max_offset == 1


def test_replay_after_restart_writes_nothing(open_store: OpenStore) -> None:
    # SPEC D9: the handed-over mark survives a restart, also when re-derived from the log
    store = open_store(levels=LEVELS)
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"%d" % i, delay_level=1) for i in range(5)])
    store.flush()
    data = store.config.data_dir
    checkpoint = (data / naming.CHECKPOINT_FILE).read_bytes()
    now = results[-1].store_timestamp + 1_000
    assert store.handover(1, 0, 3, now_ms=now).delivered == 3
    store.close()
    # a crash before the next checkpoint: the mark must come back from the CommitLog
    (data / naming.CHECKPOINT_FILE).write_bytes(checkpoint)

    store = open_store(levels=LEVELS)
    assert store.schedule_entries(1, 0, 10).handed_over == 2
    replay = store.handover(1, 0, 10, now_ms=now)
    assert (replay.skipped, replay.delivered, replay.next_offset) == (3, 2, 5)
    bodies = [m.body for m in store.read_queue("T", 0, 0, 100).messages]
    assert bodies == [b"0", b"1", b"2", b"3", b"4"]
    store.close()

    store = open_store(levels=LEVELS)
    assert store.handover(1, 0, 10, now_ms=now).skipped == 5
    assert store.get_topic("T").queues[0].max_offset == 5


def test_deliver_time_beyond_shortened_delay_is_corrected_to_now(open_store: OpenStore) -> None:
    # SPEC D3
    store = open_store(levels="1s 2s 3s")
    store.create_topic("T", 1)
    parked = store.put(PutRequest("T", b"x", delay_level=3))
    store.close()

    store = open_store(levels="1s 2s 1s")
    (raw_ts,) = store.schedule_entries(3, 0, 10).deliver_ts
    assert raw_ts == parked.store_timestamp + 3_000  # raw, uncorrected
    now = parked.store_timestamp + 1_500  # raw_ts > now + 1s: the table was shortened
    result = store.handover(3, 0, 10, now_ms=now)
    assert result.delivered == 1
    (record,) = store.read_queue("T", 0, 0, 10).messages
    assert record.properties[P.DELIVER_TS] == str(now)


def test_unbuildable_messages_are_parked_and_progress_moves_on(open_store: OpenStore) -> None:
    # SPEC D7
    store = open_store(levels=LEVELS)
    store.create_topic("Gone", 1)
    store.create_topic("Wide", 4)
    store.create_topic(naming.TRANSACTION_HALF_TOPIC, 1, system=True)
    store.create_topic("Ok", 1)
    gone = store.put(PutRequest("Gone", b"a", delay_level=1))
    wide = store.put(PutRequest("Wide", b"b", queue_id=3, delay_level=1))
    half_src = store.put(PutRequest("Ok", b"c"))
    store.copy([CopyRequest(half_src.commitlog_offset, naming.TRANSACTION_HALF_TOPIC,
                            delay_level=1)])
    last = store.put(PutRequest("Ok", b"d", delay_level=1))
    store.delete_topic("Gone")
    store.delete_topic("Wide")
    store.create_topic("Wide", 2)

    result = store.handover(1, 0, 10, now_ms=last.store_timestamp + 1_000)
    assert (result.parked, result.delivered, result.next_offset) == (3, 1, 4)
    assert result.handed_over == 3
    parked = store.read_queue(naming.SCHEDULE_ERROR_TOPIC, 0, 0, 10).messages
    reasons = [m.properties[P.SCHEDULE_ERROR].split(":")[0] for m in parked]
    assert reasons == ["real_topic_missing", "real_qid_out_of_range", "transaction_half_topic"]
    assert [m.properties[P.SCHEDULE_OFFSET] for m in parked] == ["1:0", "1:1", "1:2"]
    assert [m.body for m in parked] == [b"a", b"b", b"c"]
    assert parked[0].properties[P.REAL_TOPIC] == "Gone"
    assert gone.topic == wide.topic == naming.SCHEDULE_TOPIC
    assert [m.body for m in store.read_queue("Ok", 0, 0, 10).messages] == [b"c", b"d"]
    assert store.get_topic(naming.SCHEDULE_ERROR_TOPIC).system


def test_retry_topic_works_as_real_destination(open_store: OpenStore) -> None:
    # SPEC D4 with a %RETRY% real topic (R7 send-back path)
    store = open_store(levels=LEVELS)
    store.create_topic("T", 1)
    original = store.put(PutRequest("T", b"job"))
    retry = naming.retry_topic("g")
    (parked,) = store.copy([CopyRequest(original.commitlog_offset, retry, delay_level=2,
                                        reconsume_times=1)])
    result = store.handover(2, 0, 10, now_ms=parked.store_timestamp + 2_000)
    assert result.delivered == 1
    (record,) = store.read_queue(retry, 0, 0, 10).messages
    assert (record.body, record.reconsume_times) == (b"job", 1)


def test_progress_above_max_starts_after_the_mark_not_at_max(open_store: OpenStore) -> None:
    # SPEC D8, D9: a position past the queue's end skips no entry
    store = open_store(levels=LEVELS)
    store.create_topic("T", 1)
    put = store.put(PutRequest("T", b"x", delay_level=1))
    result = store.handover(1, 50, 10, now_ms=put.store_timestamp)
    assert (result.from_offset, result.next_offset, result.delivered) == (0, 0, 0)
    assert result.not_due and result.next_deliver_ts == put.store_timestamp + 1_000


def test_splice_builds_exactly_what_the_rebuild_builds(open_store: OpenStore) -> None:
    # SPEC D4: the hand-over's fast path (stored bytes spliced) and the decode + re-encode
    # path give the same record, field by field and byte for byte, whatever the properties
    from clepsydra_store.engine.index.consume_queue import ENTRY

    store = open_store(levels=LEVELS)
    store.create_topic("T", 2)
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    puts = [
        PutRequest("T", b"plain", delay_level=1),
        PutRequest("T", b"", delay_level=1, queue_id=1),
        PutRequest("T", bytes(range(256)), delay_level=1, flag=7, born_timestamp=5),
        PutRequest("T", b"keys", tags="tg", keys="k1 k2", delay_level=1,
                   properties={P.UNIQ_KEY: "u-1", P.TRACEPARENT: tp, "app": "x"}),
        PutRequest("T", "ünï".encode(), delay_level=1, reconsume_times=3,
                   properties={"ключ": "значение 🎉", "z": "", "a": "1" * 300}),
    ]
    # what SDK producers send: a unique UNIQ_KEY, traceparent and keys in every message (no
    # two properties blocks equal), with keys of two lengths
    puts += [PutRequest("T", f"sdk{i}".encode(), tags="tg", keys=f"order-{i * 7 % 13}",
                        delay_level=1, properties={
                            P.UNIQ_KEY: f"u-{i:04d}-ü",
                            P.TRACEPARENT: f"00-{i:032x}-b7ad6b7169203331-01"})
             for i in range(6)]
    for req in puts:
        store.put(req)
    delivered_src = store.put(PutRequest("T", b"again", tags="t2", delay_level=1))
    due = delivered_src.store_timestamp + 1_000
    assert store.handover(1, 0, 100, now_ms=due + 5).delivered == len(puts) + 1
    (copy_src,) = [m for m in store.read_queue("T", 0, 0, 100).messages if m.body == b"again"]
    # a delivered copy sent back at a level: DELIVER_TS is already there (replaced in place)
    store.copy([CopyRequest(copy_src.commitlog_offset, naming.retry_topic("G"), delay_level=2,
                            reconsume_times=1, set_properties={P.RETRY_TOPIC: "T"})])
    store.put(PutRequest("T", b"later", delay_level=2, properties={"b": "2", "a": "1"}))

    scheduler = store._drain
    compared = 0
    for level in (1, 2):
        cq = store._handover.queue(level)
        raw = cq.read_raw(cq.min_offset, cq.max_offset - cq.min_offset)
        for i, (offset, size, _code) in enumerate(ENTRY.iter_unpack(raw)):
            segment = store._commitlog.segment_for(offset)
            assert segment is not None
            buf = segment.read(offset - segment.start, size)
            deliver_ts = due + 123 + i
            spliced = scheduler._splice(level, cq.min_offset + i, buf, 0, size, offset,
                                        deliver_ts)
            rebuilt, ok, traceparent = scheduler._rebuild(level, cq.min_offset + i, offset,
                                                          size, deliver_ts)
            assert spliced is not None and ok, (level, i)
            assert spliced[0] == rebuilt, (level, i)
            assert spliced[1] == traceparent
            compared += 1
    assert compared == len(puts) + 1 + 2


def test_a_handover_asked_to_start_ahead_skips_nothing(open_store: OpenStore) -> None:
    # SPEC D9: the handed-over mark only advances one entry after another
    store = open_store(levels=LEVELS)
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"%d" % i, delay_level=3) for i in range(100)])
    now = results[-1].store_timestamp + 3_000

    hostile = store.handover(3, 99, 1, now_ms=now)
    assert (hostile.from_offset, hostile.next_offset, hostile.delivered) == (0, 1, 1)
    assert hostile.handed_over == 0
    assert store.schedule_entries(3, 0, 1).handed_over == 0  # the level table tells the truth

    ahead = store.handover(3, 60, 10, now_ms=now)  # a scheduler whose progress ran ahead
    assert (ahead.from_offset, ahead.next_offset, ahead.delivered, ahead.skipped) == \
        (1, 11, 10, 0)
    behind = store.handover(3, 5, 1_000, now_ms=now)  # a replay from behind the mark
    assert (behind.from_offset, behind.skipped, behind.delivered, behind.next_offset) == \
        (11, 6, 89, 100)
    bodies = [m.body for m in store.read_queue("T", 0, 0, 1_000).messages]
    assert bodies == [b"%d" % i for i in range(100)]  # each exactly once, in order
    assert store.schedule_entries(3, 0, 1).handed_over == 99


def test_a_hand_over_with_an_older_fencing_token_is_refused_and_writes_nothing(
        open_store: OpenStore) -> None:
    # SPEC D9, DEC-scheduler-lease: once a newer holder of a level's lease has handed over,
    # the holder it superseded is refused, before anything is read or written
    store = open_store(levels=LEVELS)
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"%d" % i, delay_level=1) for i in range(8)])
    store.put(PutRequest("T", b"two", delay_level=2))
    now = results[-1].store_timestamp + 5_000
    assert store.handover(1, 0, 2, now_ms=now, fence=3).delivered == 2  # the first holder
    assert store.handover(1, 2, 2, now_ms=now, fence=5).delivered == 2  # its successor
    with pytest.raises(Fenced, match=r"level 1 .* token 3 is older than 5"):
        store.handover(1, 4, 2, now_ms=now, fence=3)  # the superseded holder, too late
    assert store.get_topic("T").queues[0].max_offset == 4  # nothing written by it
    assert store._fences.newest(1) == 5
    assert store.handover(1, 4, 2, now_ms=now, fence=5).delivered == 2  # the holder goes on
    assert store.handover(1, 6, 1, now_ms=now).delivered == 1  # no token: not checked
    assert store._fences.newest(1) == 5
    assert store.handover(2, 0, 5, now_ms=now, fence=1).delivered == 1  # a fence per level
    assert store.handover(1, 7, 5, now_ms=now, fence=6).delivered == 1
    assert sorted(m.body for m in store.read_queue("T", 0, 0, 20).messages) == sorted(
        [b"%d" % i for i in range(8)] + [b"two"])  # each exactly once
