"""Retention (SPEC P4) and consumer progress."""

from __future__ import annotations

import time
from pathlib import Path

from clepsydra_core import naming
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import OpenStore

FUTURE_MS = 200 * 3_600_000


def _fill(store: MessageStore, n: int, body: bytes) -> None:
    store.put_batch([PutRequest("T", body) for _ in range(n)])


def test_retention_carries_undelivered_schedule_forward_and_deletes_old_segments(
        open_store: OpenStore) -> None:
    # SPEC P4 (Beyond), D9: a lagging scheduler no longer pins old segments
    store = open_store(levels="1s 2s 3s")
    store.create_topic("T", 2)
    _fill(store, 130, b"a" * 1000)  # ~2 segments
    delayed = store.put(PutRequest("T", b"later", keys="k-later", queue_id=1, delay_level=3,
                                   properties={"UNIQ_KEY": "U-later", "app": "x"}))
    _fill(store, 200, b"b" * 1000)
    before = store.schedule_entries(3, 0, 10)
    now = int(time.time() * 1000) + FUTURE_MS

    deleted = store.delete_expired_segments(now_ms=now)
    assert deleted >= 2
    stats = store.stats()
    assert stats["commitlog_min_offset"] > delayed.commitlog_offset  # its segment is gone
    assert stats["schedule_carried_total"] == 1
    after = store.schedule_entries(3, 0, 10)
    assert after.deliver_ts == before.deliver_ts  # same place in the level, same time
    assert (after.min_offset, after.max_offset) == (0, 1)
    low = store.get_topic("T").queues[0].min_offset
    assert low > 0
    read = store.read_queue("T", 0, 0, 5)
    assert read.min_offset == low and read.messages[0].queue_offset == low

    assert store.handover(3, 0, 10, now_ms=now).delivered == 1
    assert store.handover(3, 0, 10, now_ms=now).delivered == 0  # D9: once
    got = store.read_queue("T", 1, 0, 1000).messages
    delivered = [m for m in got if m.body == b"later"]
    assert len(delivered) == 1
    props = delivered[0].properties
    assert (props["UNIQ_KEY"], props["app"], props["KEYS"]) == ("U-later", "x", "k-later")
    _fill(store, 100, b"e" * 1000)
    assert store.delete_expired_segments(now_ms=now) >= 1
    assert store.stats()["commitlog_segments"] == 1  # the active one stays
    assert store.schedule_entries(3, 0, 10).min_offset == 1  # the copy went too, handed over
    store.close()

    store = open_store(levels="1s 2s 3s")
    assert store.get_topic("T").queues[0].min_offset >= low
    assert store.put(PutRequest("T", b"after")).status == "OK"


def test_carried_entries_survive_a_reopen_and_are_delivered_once(
        open_store: OpenStore, data_dir: Path) -> None:
    # SPEC P3, P4, D9: after a carry-forward and a restart - with the checkpoint, or without
    # it (re-dispatch of the whole log) - every delayed message is delivered exactly once
    store = open_store(levels="1s 2s 3s")
    store.create_topic("T", 1)
    bodies = [f"d{i}".encode() for i in range(5)]
    for i, body in enumerate(bodies):
        store.put(PutRequest("T", body, delay_level=1 + i % 3))
        _fill(store, 40, b"c" * 1000)
    now = int(time.time() * 1000) + FUTURE_MS
    store.handover(1, 0, 1, now_ms=now)  # d0 delivered before retention: not carried
    assert store.delete_expired_segments(now_ms=now) >= 2
    assert store.stats()["schedule_carried_total"] == 4
    store.close()
    (data_dir / naming.CHECKPOINT_FILE).unlink()  # recovery re-dispatches every record

    store = open_store(levels="1s 2s 3s")
    for level in (1, 2, 3):
        store.handover(level, 0, 10, now_ms=now)
        assert store.handover(level, 0, 10, now_ms=now).delivered == 0
    got = [m.body for m in store.read_queue("T", 0, 0, 10_000).messages if m.body in bodies]
    assert sorted(got) == sorted(bodies)


def test_nothing_is_deleted_within_retention(open_store: OpenStore) -> None:
    # SPEC P4
    store = open_store()
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"a" * 1000) for _ in range(200)])
    assert store.delete_expired_segments() == 0


def test_group_offsets_survive_reopen(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("T", 2)
    store.commit_offset("g", "T", 0, 5)
    store.commit_offset("g", "T", 1, 7)
    store.commit_offset("g", "U", 0, 1)
    store.commit_offset("h", "T", 0, 2)
    store.close()
    store = open_store()
    assert store.group_offsets("g") == {"T": {0: 5, 1: 7}, "U": {0: 1}}
    assert store.group_offsets("g", "T") == {"T": {0: 5, 1: 7}}
    assert store.group_offsets("nobody") == {}
    assert (store.config.data_dir / naming.CONFIG_DIR / naming.GROUP_OFFSETS_FILE).exists()


def test_topics_survive_reopen(open_store: OpenStore) -> None:
    store = open_store()
    store.create_topic("T", 3)
    store.put(PutRequest(naming.retry_topic("g"), b"x"))
    store.close()
    store = open_store()
    assert len(store.get_topic("T").queues) == 3
    retry = store.get_topic(naming.retry_topic("g"))
    assert retry.system and retry.queues[0].max_offset == 1
