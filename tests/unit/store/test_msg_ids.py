"""A message keeps its id: the msgId a producer gets is the message's unique id
(UNIQ_KEY, made by the store when the producer gave none), kept by every copy - parked,
delivered, retried, dead-lettered - and the look-up by msgId finds them all; each record's own
place is its offsetMsgId. Records from before unique ids (no UNIQ_KEY) keep theirs."""

from __future__ import annotations

import re

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import MessageNotFound
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import CopyRequest, PutRequest
from tests.unit.store.conftest import OpenStore

HEX32 = re.compile(r"[0-9A-F]{32}")


def _delivered(store: MessageStore, level: int, now_ms: int) -> None:
    assert store.handover(level, 0, 10, now_ms=now_ms).delivered >= 1


def test_the_store_gives_a_message_its_unique_id(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("T", 1)
    plain = store.put(PutRequest("T", b"no id"))  # the produce fast path
    props = store.put(PutRequest("T", b"with props", tags="tg", keys="k",
                                 properties={"app": "x"}))
    retry = store.put(PutRequest(naming.retry_topic("G"), b"slow path"))  # Preparer.put
    given = store.put(PutRequest("T", b"client id", properties={P.UNIQ_KEY: "CLIENT-1"}))
    for result in (plain, props, retry):
        assert HEX32.fullmatch(result.msg_id) and result.msg_id != result.offset_msg_id
        record = store.get_by_commitlog_offset(result.commitlog_offset)
        assert record.properties[P.UNIQ_KEY] == record.msg_id == result.msg_id
        assert record.offset_msg_id == result.offset_msg_id
    assert len({plain.msg_id, props.msg_id, retry.msg_id}) == 3
    assert list(store.get_by_commitlog_offset(props.commitlog_offset).properties) == [
        "app", P.UNIQ_KEY, P.TAGS, P.KEYS]  # where Preparer.put's dict puts it
    assert given.msg_id == "CLIENT-1"
    assert store.get_by_msg_id("CLIENT-1") == [store.get_by_commitlog_offset(
        given.commitlog_offset)]


def test_every_copy_keeps_the_id_and_the_look_up_finds_them_all(open_store: OpenStore) -> None:
    store = open_store(levels="1s 2s")
    store.create_topic("T", 1)
    parked = store.put(PutRequest("T", b"later", delay_level=1))
    assert parked.topic == naming.SCHEDULE_TOPIC
    _delivered(store, 1, parked.store_timestamp + 1_000)
    [delivered] = store.read_queue("T", 0, 0, 10).messages
    assert delivered.msg_id == parked.msg_id != delivered.offset_msg_id
    retry, dlq = naming.retry_topic("G"), naming.dlq_topic("G")
    [retried] = store.copy([CopyRequest(delivered.commitlog_offset, retry, reconsume_times=1)])
    [dead] = store.copy([CopyRequest(retried.commitlog_offset, dlq, reconsume_times=2)])
    assert retried.msg_id == dead.msg_id == parked.msg_id
    copies = store.get_by_msg_id(parked.msg_id)
    assert [(c.topic, c.offset_msg_id) for c in copies] == [
        (naming.SCHEDULE_TOPIC, parked.offset_msg_id), ("T", delivered.offset_msg_id),
        (retry, retried.offset_msg_id), (dlq, dead.offset_msg_id)]
    assert store.get_by_msg_id(parked.msg_id.lower()) == copies
    assert store.get_by_msg_id(retried.offset_msg_id) == copies  # one copy's place: all
    assert store.get_by_msg_id(retried.offset_msg_id.lower()) == copies
    with pytest.raises(MessageNotFound):
        store.get_by_msg_id("7F00000100001F9100000000075BCD15")


def test_a_record_from_before_unique_ids_keeps_its_msg_id(open_store: OpenStore) -> None:
    # what such a record is: no UNIQ_KEY (a copy that drops it makes one, on disk alike)
    store = open_store(levels="1s 2s")
    store.create_topic("T", 1)
    source = store.put(PutRequest("T", b"old"))
    [old] = store.copy([CopyRequest(source.commitlog_offset, "T", remove_properties=(P.UNIQ_KEY,))])
    old_record = store.get_by_commitlog_offset(old.commitlog_offset)
    assert P.UNIQ_KEY not in old_record.properties
    assert old.msg_id == old.offset_msg_id == old_record.msg_id  # its msgId is its place
    [retried] = store.copy([CopyRequest(old.commitlog_offset, naming.retry_topic("G"))])
    assert retried.msg_id == old.offset_msg_id  # a copy keeps the id it was known by
    assert [r.offset_msg_id for r in store.get_by_msg_id(old.offset_msg_id)] == [
        old.offset_msg_id, retried.offset_msg_id]
    # parked before unique ids: delivered with the msgId its producer was given
    [parked] = store.copy([CopyRequest(source.commitlog_offset, "T", delay_level=1,
                                    remove_properties=(P.UNIQ_KEY,))])
    assert parked.msg_id == parked.offset_msg_id
    _delivered(store, 1, parked.store_timestamp + 1_000)
    delivered = store.read_queue("T", 0, 0, 10).messages[-1]
    assert delivered.msg_id == parked.offset_msg_id != delivered.offset_msg_id
