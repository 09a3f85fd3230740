"""Changing and removing topics in the engine (rules A1, A2 and S3 of
docs/semantics.md): real files, restarts included."""

from __future__ import annotations

import shutil

import pytest

from clepsydra_core import naming
from clepsydra_core.errors import Forbidden, OffsetOutOfRange, TopicNotFound, ValidationError
from clepsydra_store.engine.message_store import TopicBusy
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import OpenStore


def _max_offsets(store: object, topic: str) -> list[int]:
    return [q.max_offset for q in store.get_topic(topic).queues]  # type: ignore[attr-defined]


def test_growing_adds_empty_queues_that_take_messages_and_survive_a_restart(
        open_store: OpenStore) -> None:
    # SPEC A1: grow
    store = open_store()
    store.create_topic("orders", 1)
    store.put(PutRequest("orders", b"before"))
    info = store.update_topic("orders", 4)
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in info.queues] == [
        (0, 0, 1), (1, 0, 0), (2, 0, 0), (3, 0, 0)]
    store.put_batch([PutRequest("orders", b"after") for _ in range(8)])
    assert sum(_max_offsets(store, "orders")) == 9
    assert store.read_queue("orders", 3, 0, 10).messages
    store.close()

    store = open_store()
    assert len(store.get_topic("orders").queues) == 4
    assert sum(_max_offsets(store, "orders")) == 9
    # the same count again is a no-op; creating it with its new count answers "exists"
    assert len(store.update_topic("orders", 4).queues) == 4
    assert store.create_topic("orders", 4)[1] is False


def test_shrinking_is_refused_while_a_hidden_queue_holds_unconsumed_messages(
        open_store: OpenStore) -> None:
    # SPEC A1: shrink only what every group has consumed
    store = open_store()
    store.create_topic("orders", 3)
    store.put(PutRequest("orders", b"q2", queue_id=2))
    with pytest.raises(TopicBusy, match=r"queue 2 .*no group has consumed them.*SPEC A1"):
        store.update_topic("orders", 2)
    store.commit_offset("billing", "orders", 2, 1)
    store.commit_offset("audit", "orders", 0, 0)  # audit has not consumed queue 2
    with pytest.raises(TopicBusy, match=r"audit at 0"):
        store.update_topic("orders", 2)
    assert len(store.get_topic("orders").queues) == 3  # nothing changed
    store.commit_offset("audit", "orders", 2, 1)

    info = store.update_topic("orders", 2)
    assert len(info.queues) == 2
    with pytest.raises(OffsetOutOfRange):  # hidden from consumers ...
        store.read_queue("orders", 2, 0, 10)
    with pytest.raises(OffsetOutOfRange):  # ... and producers
        store.put(PutRequest("orders", b"x", queue_id=2))
    store.put_batch([PutRequest("orders", b"y") for _ in range(4)])
    assert _max_offsets(store, "orders") == [2, 2]
    store.close()

    # its files stay: growing back shows the queue where its consumers left it
    store = open_store()
    assert len(store.get_topic("orders").queues) == 2
    assert _max_offsets(store, "orders") == [2, 2]
    assert [q.max_offset for q in store.update_topic("orders", 3).queues] == [2, 2, 1]
    assert store.group_offsets("billing", "orders") == {"orders": {2: 1}}


def test_shrinking_past_empty_queues_needs_no_consumer(open_store: OpenStore) -> None:
    # SPEC A1: queues that never held a message go at once
    store = open_store()
    store.create_topic("orders", 4)
    store.put(PutRequest("orders", b"x", queue_id=0))
    assert len(store.update_topic("orders", 1).queues) == 1


def test_delete_removes_queues_and_progress_and_a_new_topic_of_that_name_starts_empty(
        open_store: OpenStore) -> None:
    # SPEC A2
    store = open_store()
    store.create_topic("orders", 2)
    old = store.put_batch([PutRequest("orders", b"old%d" % i, keys="k") for i in range(6)])
    store.commit_offset("billing", "orders", 0, 3)
    store.commit_offset("billing", "other", 0, 1)
    assert store.delete_topic("orders") is True
    assert store.delete_topic("orders") is False
    with pytest.raises(TopicNotFound):
        store.get_topic("orders")
    with pytest.raises(TopicNotFound):
        store.put(PutRequest("orders", b"x"))
    assert store.group_offsets("billing") == {"other": {0: 1}}
    # the records stay in the CommitLog until retention: a msgId still finds one
    assert [r.body for r in store.get_by_msg_id(old[0].msg_id)] == [b"old0"]

    store.create_topic("orders", 2)
    new = store.put(PutRequest("orders", b"new", keys="k", queue_id=0))
    assert new.queue_offset == 0
    assert [m.body for m in store.get_by_key("orders", "k")] == [b"new"]
    store.close()

    # a restart that dispatches the whole CommitLog again (ConsumeQueue files lost) keeps
    # the old records out of the new topic
    shutil.rmtree(store.config.data_dir / naming.CONSUMEQUEUE_DIR / "orders")
    store = open_store()
    assert [m.body for m in store.read_queue("orders", 0, 0, 10).messages] == [b"new"]
    assert _max_offsets(store, "orders") == [1, 0]
    assert store.group_offsets("billing") == {"other": {0: 1}}


def test_deleted_topic_stays_deleted_after_a_restart(open_store: OpenStore) -> None:
    # SPEC A2: the topic config is persisted
    store = open_store()
    store.create_topic("orders", 2)
    store.put(PutRequest("orders", b"x"))
    store.delete_topic("orders")
    store.close()
    store = open_store()
    assert "orders" not in {t.name for t in store.list_topics()}


@pytest.mark.parametrize("topic", [naming.SCHEDULE_TOPIC, naming.retry_topic("billing"),
                                   naming.dlq_topic("billing"), naming.SCHEDULE_ERROR_TOPIC])
def test_system_topics_cannot_be_changed_or_deleted(open_store: OpenStore, topic: str) -> None:
    # SPEC S3
    store = open_store()
    if topic != naming.SCHEDULE_TOPIC:
        store.create_topic(topic, 1, system=True)
    with pytest.raises(Forbidden, match="SPEC S3"):
        store.delete_topic(topic)
    with pytest.raises(Forbidden, match="SPEC S3"):
        store.update_topic(topic, 2)
    assert store.get_topic(topic)


def test_update_checks_its_input(open_store: OpenStore) -> None:
    store = open_store()
    with pytest.raises(TopicNotFound):
        store.update_topic("missing", 2)
    store.create_topic("orders", 1)
    for bad in (0, 1025, True):
        with pytest.raises(ValidationError):
            store.update_topic("orders", bad)
