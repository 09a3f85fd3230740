"""Retention (SPEC P4) and consumer progress."""

from __future__ import annotations

import time

from clepsydra_core import naming
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import OpenStore

FUTURE_MS = 200 * 3_600_000


def test_retention_deletes_old_segments_but_keeps_undelivered_schedule(
        open_store: OpenStore) -> None:
    # SPEC P4
    store = open_store(levels="1s 2s 3s")
    store.create_topic("T", 2)
    store.put_batch([PutRequest("T", b"a" * 1000) for _ in range(130)])  # ~2 segments
    delayed = store.put(PutRequest("T", b"later", delay_level=3))
    store.put_batch([PutRequest("T", b"b" * 1000) for _ in range(200)])
    segments = int(store.stats()["commitlog_segments"])
    now = int(time.time() * 1000) + FUTURE_MS

    deleted = store.delete_expired_segments(now_ms=now)
    assert deleted >= 1
    stats = store.stats()
    assert stats["commitlog_min_offset"] <= delayed.commitlog_offset
    assert stats["commitlog_segments"] == segments - deleted
    assert store.get_by_commitlog_offset(delayed.commitlog_offset).body == b"later"
    low = store.get_topic("T").queues[0].min_offset
    assert low > 0
    read = store.read_queue("T", 0, 0, 5)
    assert read.min_offset == low and read.messages[0].queue_offset == low

    assert store.handover(3, 0, 10, now_ms=now).delivered == 1
    assert store.delete_expired_segments(now_ms=now) >= 1
    assert store.stats()["commitlog_segments"] == 1  # the active one stays
    assert store.schedule_entries(3, 0, 10).min_offset == 1
    store.close()

    store = open_store(levels="1s 2s 3s")
    assert store.get_topic("T").queues[0].min_offset >= low
    assert store.put(PutRequest("T", b"after")).status == "OK"


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
