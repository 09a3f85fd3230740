"""Produce, read, routing and copy through the engine (real files, tiny segments)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    Forbidden,
    MessageNotFound,
    OffsetOutOfRange,
    TopicNotFound,
    ValidationError,
)
from clepsydra_core.records import (
    END_MAGIC,
    SYS_FLAG_TRANSACTION_PREPARED,
    QueueEntry,
    decode_record,
    peek_size_magic,
    tags_code,
)
from clepsydra_store.engine.types import CopyRequest, PutRequest, PutStatus
from tests.unit.store.conftest import OpenStore

BORN_HOST = b"\x0a\x00\x00\x05\x00\x00\x1f\x90"


def test_put_then_read_round_trips_every_field(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("Orders", 2)
    result = store.put(PutRequest("Orders", b"\x00\xffbody", tags="paid", keys="k1 k2",
                                  properties={P.UNIQ_KEY: "u-1"}, queue_id=1, flag=7,
                                  born_timestamp=123, born_host=BORN_HOST))
    assert result.status is PutStatus.OK
    assert (result.topic, result.queue_id, result.queue_offset) == ("Orders", 1, 0)
    read = store.read_queue("Orders", 1, 0, 10)
    assert (read.next_offset, read.min_offset, read.max_offset) == (1, 0, 1)
    (record,) = read.messages
    assert record.body == b"\x00\xffbody"
    assert record.properties == {P.UNIQ_KEY: "u-1", P.TAGS: "paid", P.KEYS: "k1 k2"}
    assert (record.flag, record.born_timestamp, record.born_host) == (7, 123, BORN_HOST)
    assert record.commitlog_offset == result.commitlog_offset
    assert record.store_timestamp == result.store_timestamp
    assert record.msg_id == result.msg_id == "u-1"  # the unique id
    assert record.offset_msg_id == result.offset_msg_id
    assert store.get_by_msg_id(result.msg_id) == [record]
    assert store.get_by_msg_id(result.offset_msg_id) == [record]
    assert store.get_by_commitlog_offset(result.commitlog_offset) == record
    assert store.get_by_key("Orders", "k2") == [record]
    assert store.get_by_key("Orders", "u-1") == [record]
    assert store.get_by_key("Other", "k2") == []


def test_consume_queue_entry_is_offset_size_tags_hash(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"m%d" % i, tags="a") for i in range(3)])
    store.flush()
    cq_file = store.config.data_dir / naming.CONSUMEQUEUE_DIR / "T" / "0" / \
        naming.segment_file_name(0)
    raw = cq_file.read_bytes()
    assert len(raw) == 3 * QueueEntry.SIZE
    for i, r in enumerate(results):
        entry = QueueEntry.decode(raw, i * QueueEntry.SIZE)
        assert entry == QueueEntry(r.commitlog_offset, r.size, tags_code("a"))


def test_segments_roll_with_end_marker(open_store: OpenStore) -> None:
    # DESIGN Formats: a segment tail that cannot hold the next record is marked end-of-file.
    store = open_store()
    store.create_topic("T", 3)
    bodies = [bytes([i % 251]) * (1000 + i * 37 % 3000) for i in range(200)]
    results = store.put_batch([PutRequest("T", b) for b in bodies])
    segment_dir = store.config.data_dir / naming.COMMITLOG_DIR
    files = sorted(segment_dir.iterdir())
    assert len(files) > 5
    for path in files[:-1]:
        raw = path.read_bytes()
        assert len(raw) == 64 * 1024
        pos = 0
        while True:
            marker_size, magic = peek_size_magic(raw, pos)
            if magic == END_MAGIC:
                assert pos + marker_size == len(raw)
                break
            record, size = decode_record(raw, pos)
            assert record.commitlog_offset == int(path.name) + pos
            pos += size
    got = [m.body for q in range(3) for m in store.read_queue("T", q, 0, 500).messages]
    assert sorted(got) == sorted(bodies)
    assert [store.get_by_commitlog_offset(r.commitlog_offset).body for r in results] == bodies


def test_message_larger_than_a_segment_is_refused(open_store: OpenStore) -> None:
    # SPEC P1
    store = open_store()
    store.create_topic("T", 1)
    with pytest.raises(ValidationError):
        store.put(PutRequest("T", b"x" * 70_000))
    assert store.get_topic("T").queues[0].max_offset == 0


def test_delayed_message_is_parked_in_schedule_topic(open_store: OpenStore) -> None:
    # SPEC S1, S2, L3
    store = open_store()
    store.create_topic("T", 4)
    result = store.put(PutRequest("T", b"later", tags="x", queue_id=2, delay_level=3))
    assert (result.topic, result.queue_id) == (naming.SCHEDULE_TOPIC, 2)
    record = store.get_by_commitlog_offset(result.commitlog_offset)
    assert record.topic == naming.SCHEDULE_TOPIC
    assert record.properties[P.REAL_TOPIC] == "T"
    assert record.properties[P.REAL_QID] == "2"
    assert record.properties[P.DELAY] == "3"
    entries = store.schedule_entries(3, 0, 10)
    assert entries.deliver_ts == [result.store_timestamp + 10_000]
    assert store.get_topic("T").queues[2].max_offset == 0
    with pytest.raises(Forbidden):  # S3
        store.read_queue(naming.SCHEDULE_TOPIC, 2, 0, 1)


def test_level_above_max_is_clamped_and_negative_refused(open_store: OpenStore) -> None:
    # SPEC L2
    store = open_store(levels="1s 2s 3s")
    store.create_topic("T", 1)
    result = store.put(PutRequest("T", b"x", delay_level=99))
    assert result.queue_id == 2
    record = store.get_by_commitlog_offset(result.commitlog_offset)
    assert record.properties[P.DELAY] == "3"
    with pytest.raises(ValidationError) as info:
        store.put(PutRequest("T", b"y", delay_level=-1))
    assert "L2" in str(info.value)
    assert store.schedule_entries(3, 0, 10).max_offset == 1


def test_transaction_prepared_message_is_not_delayed(open_store: OpenStore) -> None:
    # SPEC S1
    store = open_store()
    store.create_topic("T", 1)
    result = store.put(PutRequest("T", b"x", delay_level=2,
                                  sys_flag=SYS_FLAG_TRANSACTION_PREPARED))
    assert result.topic == "T"


def test_batch_with_one_bad_message_stores_nothing(open_store: OpenStore) -> None:
    # SPEC P1
    store = open_store(max_body_bytes=100)
    store.create_topic("T", 2)
    before = store.stats()["commitlog_max_offset"]
    bad_batches = [
        [PutRequest("T", b"ok"), PutRequest("T", b"x" * 101)],
        [PutRequest("T", b"ok"), PutRequest("Missing", b"x")],
        [PutRequest("T", b"ok"), PutRequest("T", b"x", queue_id=2)],
        [PutRequest("T", b"ok"), PutRequest("T", b"x", properties={P.REAL_TOPIC: "X"})],
        [PutRequest("T", b"ok"), PutRequest("T", b"x", delay_level=-3)],
        [PutRequest("T", b"ok"), PutRequest("T", b"x", tags="\ud800")],
    ]
    errors = (ValidationError, TopicNotFound, OffsetOutOfRange)
    for batch in bad_batches:
        with pytest.raises(errors):
            store.put_batch(batch)
    assert store.stats()["commitlog_max_offset"] == before
    assert all(q.max_offset == 0 for q in store.get_topic("T").queues)


def test_system_topics_refuse_plain_produce(open_store: OpenStore) -> None:
    # SPEC S3
    store = open_store()
    with pytest.raises(Forbidden):
        store.put(PutRequest(naming.dlq_topic("g"), b"x"))
    with pytest.raises(Forbidden):
        store.create_topic("%DLQ%g", 1)


def test_round_robin_spreads_over_queues(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("T", 3)
    results = store.put_batch([PutRequest("T", b"x") for _ in range(9)])
    assert sorted(r.queue_id for r in results) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    with pytest.raises(OffsetOutOfRange):
        store.read_queue("T", 3, 0, 1)
    with pytest.raises(OffsetOutOfRange):
        store.read_queue("T", 0, 4, 1)


def test_plain_send_to_retry_topic_at_max_goes_to_dlq(open_store: OpenStore) -> None:
    # SPEC R10
    store = open_store()
    retry = naming.retry_topic("g")
    under = store.put(PutRequest(retry, b"again", properties={P.RECONSUME_TIME: "2",
                                                            P.MAX_RECONSUME_TIMES: "3"}))
    assert under.topic == retry
    assert store.get_by_commitlog_offset(under.commitlog_offset).reconsume_times == 2
    at_max = store.put(PutRequest(retry, b"dead", properties={P.RECONSUME_TIME: "3",
                                                            P.MAX_RECONSUME_TIMES: "3"}))
    assert (at_max.topic, at_max.queue_id) == (naming.dlq_topic("g"), 0)
    record = store.get_by_commitlog_offset(at_max.commitlog_offset)
    assert record.properties[P.DLQ_REASON] == "max_reconsume_times"
    assert record.reconsume_times == 3
    default_max = store.put(PutRequest(retry, b"d2", reconsume_times=16))
    assert default_max.topic == naming.dlq_topic("g")
    assert store.get_topic(naming.dlq_topic("g")).queues[0].max_offset == 2


def test_copy_keeps_message_and_applies_changes(open_store: OpenStore) -> None:
    # SPEC R8 (through the internal copy)
    store = open_store()
    store.create_topic("T", 1)
    original = store.put(PutRequest("T", b"payload", tags="t1", flag=3, born_timestamp=77,
                                    born_host=BORN_HOST, properties={P.UNIQ_KEY: "u"}))
    retry = naming.retry_topic("g")
    plain, delayed = store.copy([
        CopyRequest(original.commitlog_offset, retry, reconsume_times=1,
                    set_properties={P.RETRY_TOPIC: "T"}, remove_properties=(P.UNIQ_KEY,)),
        CopyRequest(original.commitlog_offset, retry, delay_level=2),
    ])
    assert plain.commitlog_offset + plain.size == delayed.commitlog_offset
    copied = store.get_by_commitlog_offset(plain.commitlog_offset)
    assert (copied.topic, copied.body, copied.flag) == (retry, b"payload", 3)
    assert (copied.born_timestamp, copied.born_host, copied.reconsume_times) == (77, BORN_HOST, 1)
    assert copied.properties == {P.TAGS: "t1", P.RETRY_TOPIC: "T"}
    assert store.read_queue(retry, 0, 0, 5).messages == [copied]
    assert delayed.topic == naming.SCHEDULE_TOPIC
    parked = store.get_by_commitlog_offset(delayed.commitlog_offset)
    assert parked.properties[P.REAL_TOPIC] == retry
    assert store.get_topic(retry).queues == (store.get_topic(retry).queues[0],)
    with pytest.raises(MessageNotFound) as info:
        store.copy([CopyRequest(999_999, retry)])
    assert "999999" in str(info.value)


def test_copy_appends_to_a_list_property(open_store: OpenStore) -> None:
    # a DLQ resend is appended to the message's RESEND_HISTORY by the copy
    store = open_store()
    store.create_topic("T", 1)
    original = store.put(PutRequest("T", b"x"))
    retry = naming.retry_topic("g")
    [first] = store.copy([CopyRequest(original.commitlog_offset, retry,
                                   append_properties={P.RESEND_HISTORY: '{"n":1}'})])
    [second] = store.copy([CopyRequest(first.commitlog_offset, retry,
                                    append_properties={P.RESEND_HISTORY: '{"n":2}'})])
    props = store.get_by_commitlog_offset(second.commitlog_offset).properties
    assert json.loads(props[P.RESEND_HISTORY]) == [{"n": 1}, {"n": 2}]
    [third] = store.copy([CopyRequest(second.commitlog_offset, retry,
                                   append_properties={P.RESEND_HISTORY: "not json"})])
    props = store.get_by_commitlog_offset(third.commitlog_offset).properties
    assert json.loads(props[P.RESEND_HISTORY])[-1] == "not json"  # text, not JSON: as text
    end = store.get_topic(retry).queues[0].max_offset
    with pytest.raises(ValidationError, match="property"):
        store.copy([CopyRequest(original.commitlog_offset, retry),
                    CopyRequest(original.commitlog_offset, retry, append_properties={"": "x"})])
    assert store.get_topic(retry).queues[0].max_offset == end  # nothing written


def test_tag_filter_on_pull(open_store: OpenStore) -> None:
    # SPEC C3
    store = open_store()
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"%d" % i, tags="ab"[i % 2]) for i in range(6)])
    read = store.read_queue("T", 0, 0, 2, tags=frozenset({"b"}))
    assert [m.body for m in read.messages] == [b"1", b"3"]
    assert read.next_offset == 4


def test_create_topic_is_idempotent_and_lists_schedule_topic(open_store: OpenStore) -> None:
    store = open_store(levels="1s 2s")
    info, created = store.create_topic("T", 2)
    assert created and len(info.queues) == 2
    assert store.create_topic("T", 2)[1] is False
    with pytest.raises(ValidationError):
        store.create_topic("T", 3)
    names = {t.name: t for t in store.list_topics()}
    assert len(names[naming.SCHEDULE_TOPIC].queues) == 2
    assert names[naming.SCHEDULE_TOPIC].system


def test_r10_takes_plain_sends_only_and_the_groups_settings(open_store: OpenStore) -> None:
    # SPEC R3, R5, R10: a delayed copy to %RETRY% (an R9 fallback's last retry)
    # is parked, not dead-lettered; the group's retryMaxTimes and retryQueueNums apply
    store = open_store()
    store.put_group_settings("G", {"retryMaxTimes": 3, "retryQueueNums": 2})
    retry = naming.retry_topic("G")
    delayed = store.put(PutRequest(retry, b"last retry", delay_level=1,
                                   properties={P.RECONSUME_TIME: "3"}))
    assert delayed.topic == naming.SCHEDULE_TOPIC
    assert len(store.get_topic(retry).queues) == 2  # created with the group's count (R3)
    plain = store.put(PutRequest(retry, b"at the max", properties={P.RECONSUME_TIME: "3"}))
    assert plain.topic == naming.dlq_topic("G")  # the group's max is 3, not 16
    below = store.put(PutRequest(retry, b"below", properties={P.RECONSUME_TIME: "2"}))
    assert below.topic == retry
    assert store.get_by_msg_id(delayed.offset_msg_id)[0].reconsume_times == 3


def test_a_pull_page_is_read_one_pread_a_run_of_records(open_store: OpenStore,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC C3 (the page as before), DEC-pull-page-spans: the records of a page that lie close
    # together in one segment are read with one pread, not one a record; a page that crosses
    # segments (64 KiB here) is read a run a segment, every record in its order
    import os

    store = open_store()
    store.create_topic("T", 2)
    store.put_batch([PutRequest("T", b"x" * (100 + i % 50), queue_id=i % 2, tags="ab"[i % 3 % 2])
                     for i in range(600)])
    one_by_one = [store.read_queue("T", 0, q, 1).messages[0] for q in range(300)]
    reads: list[int] = []
    real_pread = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:  # the CommitLog's preads counted
        if "/commitlog/" in os.readlink(f"/proc/self/fd/{fd}"):
            reads.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counted)
    page = store.read_queue("T", 0, 0, 300)
    assert page.messages == one_by_one and page.next_offset == 300
    segments = len({m.commitlog_offset // (64 * 1024) for m in page.messages})
    assert 1 < segments == len(reads)  # was 300: one a record
    reads.clear()
    first = store.read_queue("T", 0, 0, 20)
    assert first.messages == one_by_one[:20] and len(reads) == 1
    reads.clear()
    tagged = store.read_queue("T", 0, 0, 7, tags=frozenset({"b"}))  # C3: by hash, then string
    assert [m.queue_offset for m in tagged.messages] == [
        m.queue_offset for m in one_by_one if m.tags == "b"][:7]
    assert tagged.next_offset == tagged.messages[-1].queue_offset + 1
    assert len(reads) == 1


def test_records_read_a_run_at_a_time_are_none_where_no_record_starts(
        open_store: OpenStore, data_dir: Path) -> None:
    # DEC-pull-page-spans: CommitLog.read_records answers what read_record would for each
    # place, in order: the record, or None where none starts (a place inside a record, past
    # the end, a size of 0) - the pull skips those as it skipped MessageNotFound
    from clepsydra_store.engine.log.commitlog import CommitLog

    store = open_store()
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"b%d" % i) for i in range(5)])
    store.flush()
    log = CommitLog(data_dir / "commitlog", 64 * 1024)
    r = results
    places = [(r[0].commitlog_offset, r[0].size), (r[1].commitlog_offset + 4, r[1].size),
              (r[2].commitlog_offset, r[2].size), (r[3].commitlog_offset, 0),
              (r[4].commitlog_offset, r[4].size), (log.max_offset + 100, 50)]
    read = log.read_records(places)
    assert [x.body if x is not None else None for x in read] == [
        b"b0", None, b"b2", b"b3", b"b4", None]  # size 0: read alone, as read_record does
    assert [x.commitlog_offset for x in read if x is not None] == [
        r[0].commitlog_offset, r[2].commitlog_offset, r[3].commitlog_offset,
        r[4].commitlog_offset]


def test_a_pull_page_read_as_json_views_is_the_view_of_its_records(
        open_store: OpenStore, data_dir: Path) -> None:
    # SPEC C3 (the same page, the tag filter by hash then by string), DEC-pull-json-view: a
    # pull's page decoded straight into its v1 JSON view is message_to_json of the records the
    # same read gives, with and without bodies, across segments, and where a record is read on
    # its own (a place where none starts, a size of 0)
    from clepsydra_core.records import message_to_json
    from clepsydra_store.api.answers import VIEWS
    from clepsydra_store.engine.log.commitlog import CommitLog

    store = open_store()
    store.create_topic("T", 2)
    store.put_batch([PutRequest("T", b"\xff" * (i % 3) + b"x" * (100 + i % 50), queue_id=i % 2,
                                tags="ab"[i % 3 % 2], keys=f"k{i}",
                                properties={"n": str(i), "名": "値"})
                     for i in range(600)])
    for tags in (None, frozenset({"b"}), frozenset({"a", "c"})):
        for with_body in (True, False):
            records = store.read_queue("T", 0, 3, 250, tags)
            views = store.read_queue("T", 0, 3, 250, tags, VIEWS[with_body])
            assert len(views.messages) > 50
            assert views.messages == [message_to_json(r, with_body=with_body)
                                      for r in records.messages]
            assert (views.next_offset, views.min_offset, views.max_offset) == (
                records.next_offset, records.min_offset, records.max_offset)
    held = store.pull("T", 1, 0, 10, None, 0, 0, VIEWS[True])
    assert [v["queueOffset"] for v in held.messages] == list(range(10))
    store.flush()
    log = CommitLog(data_dir / "commitlog", 64 * 1024)
    r = store.read_queue("T", 1, 0, 3).messages
    places = [(r[0].commitlog_offset, 1), (r[1].commitlog_offset + 4, 9),
              (r[2].commitlog_offset, 0)]
    assert log.read_records(places, 0, VIEWS[False]) == [
        message_to_json(r[0], with_body=False), None, message_to_json(r[2], with_body=False)]


def test_a_group_refuses_each_alone_and_a_refused_one_creates_no_topic(
        open_store: OpenStore) -> None:
    """``put_group`` (DEC-poller-group-append) reads a topic once for the group's messages, but
    not past one that creates a topic or is refused: a refused send to a %RETRY% topic that
    does not exist creates nothing, and the next one to it still does."""
    store = open_store()
    store.create_topic("Orders", 2)
    retry = naming.retry_topic("G")
    too_big = b"x" * (store.config.max_body_bytes + 1)
    outcomes = store.put_group([PutRequest(retry, too_big), PutRequest("Orders", b"a"),
                                PutRequest("Orders", b"b"), PutRequest("Missing", b"c"),
                                PutRequest("Orders", b"d")])
    assert isinstance(outcomes[0], ValidationError) and isinstance(outcomes[3], TopicNotFound)
    assert [o.queue_id for o in (outcomes[1], outcomes[2], outcomes[4])] == [0, 1, 0]  # type: ignore[union-attr]
    with pytest.raises(TopicNotFound):  # the refused send created nothing
        store.get_topic(retry)
    outcomes = store.put_group([PutRequest(retry, too_big), PutRequest(retry, b"e"),
                                PutRequest(retry, b"f")])
    assert isinstance(outcomes[0], ValidationError)
    assert all(o.status is PutStatus.OK for o in outcomes[1:])  # type: ignore[union-attr]
    assert store.read_queue(retry, 0, 0, 10).max_offset == 2
