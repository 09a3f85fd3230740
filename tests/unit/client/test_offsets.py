"""Committed progress (SPEC C4) and where it is kept (C2: per consumer in broadcasting)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.offsets import LocalOffsetStore, OffsetTracker, queue_offsets
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.push import MessageModel, PushConsumer
from clepsydra_client.message import Message, MessageQueue
from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.groups import GroupOffsets

if TYPE_CHECKING:
    from pathlib import Path


Q = MessageQueue("T", 0)


def msg(offset: int, body: str = "x") -> Message:
    return Message(msg_id=f"id{offset}", topic="T", body=body.encode(), queue_offset=offset,
                   store_topic="T")


def test_commit_is_the_smallest_unfinished_offset() -> None:  # SPEC C4
    t = OffsetTracker(100)
    assert t.committable() == 100
    t.add([100, 101, 102, 103])
    t.finish(101)
    t.finish(103)
    assert t.committable() == 100
    t.finish(100)
    assert t.committable() == 102
    t.finish(102)
    assert t.committable() == 104


def test_commit_never_passes_an_unfinished_message_even_when_pulls_move_on() -> None:  # SPEC C4
    t = OffsetTracker(0)
    t.add([0, 1])
    t.advance(50)  # a later pull skipped filtered messages up to 50
    t.finish(1)
    assert t.committable() == 0
    t.finish(0)
    assert t.committable() == 50


def test_finishing_twice_counts_once() -> None:
    t = OffsetTracker(0)
    t.add([0])
    assert t.finish(0) is True
    assert t.finish(0) is False
    assert t.pending_count == 0


def test_span_is_between_oldest_unfinished_and_newest_pulled() -> None:
    t = OffsetTracker(0)
    t.add(range(0, 10))
    for o in range(1, 10):
        t.finish(o)
    t.add([10, 11])
    assert t.span() == 11


def test_tracker_is_consistent_under_threads() -> None:  # SPEC C4
    t = OffsetTracker(0)
    t.add(range(2000))

    def finish(start: int) -> None:
        for o in range(start, 2000, 4):
            t.finish(o)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.committable() == 2000


def test_group_offsets_are_read_with_the_stores_wire_type() -> None:
    raw = {"group": "g", "offsets": {"T": {"0": 5, "3": 7}, "%RETRY%g": {"0": 1}}}
    assert queue_offsets(GroupOffsets.from_json(raw)) == {
        MessageQueue("T", 0): 5, MessageQueue("T", 3): 7, MessageQueue("%RETRY%g", 0): 1}
    with pytest.raises(ValidationError, match=r"offsets\.offsets\['T'\]\['0'\] must be an "
                                              "integer"):
        GroupOffsets.from_json({"group": "g", "offsets": {"T": {"0": "5"}}}, what="offsets")
    with pytest.raises(ValidationError, match=r"offsets\.offsets\['T'\]: 'x' is not a queue id"):
        GroupOffsets.from_json({"group": "g", "offsets": {"T": {"x": 5}}}, what="offsets")


def test_local_offsets_file_of_an_older_client_still_reads(tmp_path: Path) -> None:  # C2
    path = tmp_path / "g" / "client.json"
    path.parent.mkdir()
    path.write_text('{"offsets": {"T": {"1": 9}}}')  # no "group": as clients wrote it before
    assert LocalOffsetStore(path, "g").read(MessageQueue("T", 1)) == 9
    path.write_text('{"offsets": {"T": {"1": "9"}}}')
    assert LocalOffsetStore(path, "g").read(MessageQueue("T", 1)) is None  # not offsets: none


def test_local_offset_store_survives_a_restart(tmp_path: Path) -> None:  # SPEC C2
    path = tmp_path / "g" / "client.json"
    store = LocalOffsetStore(path)
    assert store.read(Q) is None
    store.update(Q, 42)
    store.update(MessageQueue("U", 3), 7)
    store.persist([Q])
    again = LocalOffsetStore(path)
    assert again.read(Q) == 42
    assert again.read(MessageQueue("U", 3)) == 7
    assert json.loads(path.read_text())["offsets"]["T"] == {"0": 42}


def test_local_offset_store_ignores_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    path.write_text("{not json")
    assert LocalOffsetStore(path).read(Q) is None


def test_process_queue_tracks_consumption_and_size() -> None:  # SPEC C4
    pq = ProcessQueue(Q, 0)
    pq.put([msg(0, "aa"), msg(1, "bbb"), msg(2)])
    assert pq.count == 3 and pq.size_bytes == 6
    started = pq.begin([msg(1)])
    assert [m.queue_offset for m in started] == [1]
    assert pq.in_flight() == 1
    assert pq.finish([1]) == [1]
    assert pq.finish([1]) == []
    assert pq.committable() == 0
    pq.finish([0, 2])
    assert pq.committable() == 3 and pq.count == 0 and pq.size_bytes == 0


def test_process_queue_reports_messages_held_too_long() -> None:  # SPEC R13
    pq = ProcessQueue(Q, 0)
    pq.put([msg(0), msg(1)])
    pq.begin([msg(0)])
    import time

    now = time.monotonic()
    assert pq.expired(10.0, now) == []
    assert [m.queue_offset for m in pq.expired(10.0, now + 11)] == [0]
    pq.finish([0])
    assert pq.expired(10.0, now + 11) == []


def test_process_queue_orderly_buffer_keeps_offset_order() -> None:  # SPEC R12
    pq = ProcessQueue(Q, 0)
    pq.put([msg(2), msg(0), msg(1)], orderly=True)
    first = pq.take_ordered(2)
    assert [m.queue_offset for m in first] == [0, 1]
    failed = [dataclasses.replace(first[0], reconsume_times=1)]
    pq.put_back_ordered(failed)
    again = pq.take_ordered(5)
    assert [m.queue_offset for m in again] == [0, 2]
    assert again[0].reconsume_times == 1


def test_dropping_forgets_messages_not_yet_taken() -> None:
    pq = ProcessQueue(Q, 0)
    pq.put([msg(0), msg(1)], orderly=True)
    pq.clear_unstarted()
    assert pq.take_ordered(5) == []
    assert pq.committable() == 0  # still unfinished: the next owner pulls them again



def test_remote_store_commits_only_changes_and_keeps_going_after_a_refusal() -> None:
    import pytest

    from clepsydra_client.consumer.offsets import RemoteOffsetStore
    from clepsydra_core.errors import OffsetOutOfRange
    from tests.unit.client.fakes import FakeHttp, as_http

    def handler(method: str, path: str, body: Any) -> dict[str, Any]:
        if body and body.get("queueId") == 1:
            raise OffsetOutOfRange("past the end")
        return {}

    http = FakeHttp(handler)
    store = RemoteOffsetStore(as_http(http), "g%x")
    q0, q1, q2 = (MessageQueue("T", i) for i in range(3))
    for q, offset in ((q0, 5), (q1, 6), (q2, 7)):
        store.update(q, offset)
    with pytest.raises(OffsetOutOfRange):
        store.persist([q0, q1, q2])
    assert [(c[1], c[2]["queueId"]) for c in http.calls] == [
        ("/v1/groups/g%25x/offsets", 0), ("/v1/groups/g%25x/offsets", 1),
        ("/v1/groups/g%25x/offsets", 2)]
    http.calls.clear()
    store.update(q1, 3)
    store.persist([q0, q2])
    assert http.calls == []  # unchanged offsets are not sent again


def test_broadcasting_progress_file_survives_a_restart(tmp_path: Path) -> None:
    # SPEC C2: the file was named after the client id, which carries the pid, so
    # a restarted consumer started over from "last"; RocketMQ keeps instanceName DEFAULT
    def path(**kw: Any) -> Path:
        consumer = PushConsumer("g", "http://127.0.0.1:1", message_model=MessageModel.BROADCASTING,
                                offset_dir=tmp_path, **kw)
        store = consumer._offset_store()
        assert isinstance(store, LocalOffsetStore)
        return store.path

    first, restarted = path(), path()  # two client ids, as two runs of a program get
    assert first == restarted and first.name.endswith("@DEFAULT.json")
    assert path(instance_name="audit-1") != first
    assert path(instance_name="audit-1").name.endswith("@audit-1.json")
