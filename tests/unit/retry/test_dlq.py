"""The DLQ toolkit (SPEC R16) against the retry service's ports (``clepsydra_retry.ports``),
with the in-memory store of ``tests/fixtures/retry.py`` and the in-memory DLQ state: listing,
showing, resending (into the group's retry topic or back to the original topic, one, a filter
or all), purging, the audit, and a store that refuses writes (R2) with nothing written; with
two store shards each shard's dead letters are counted and resent there (DEC-store-shards)."""

from __future__ import annotations

import json
import random

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import NoPermission
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry.dlq import DlqToolkit, NoRetryTopic, NotInDlq
from clepsydra_retry.dlq_state import MemoryDlqState
from clepsydra_retry.groups import MemoryGroupStore
from tests.fixtures.retry import MemoryShards, MemoryStore

GROUP = "billing"
DLQ = naming.dlq_topic(GROUP)
RETRY = naming.retry_topic(GROUP)
LEVELS = DelayLevels.default()
EVERYTHING = DlqFilter()


def _toolkit(groups: MemoryGroupStore, *stores: MemoryStore, batch: int = 1000) -> DlqToolkit:
    return DlqToolkit(MemoryShards(*stores), groups, MemoryDlqState(), LEVELS, batch=batch,
                      rng=random.Random(3), clock_ms=lambda: 1_700_000_000_500)


def _dead(store: MemoryStore, origin: str | None = "invoices",
          reason: str = "max_reconsume_times") -> StoredMessage:
    """A dead letter as send-back leaves it (R6): queue 0 of the DLQ, its origin kept (R4)."""
    props = {P.DLQ_REASON: reason, P.RECONSUME_TIME: "17"}
    if origin is not None:
        store.create_topic(origin)
        props[P.RETRY_TOPIC] = origin
    return store.produce(DLQ, f"dead from {origin}", properties=props, reconsume_times=17)


@pytest.fixture
def groups() -> MemoryGroupStore:
    found = MemoryGroupStore()
    found.put(GROUP, GroupSettings(retry_queue_nums=2))
    return found


def test_listing_and_showing_read_the_dlq_without_consuming_it(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R16
    first, second = _dead(store), _dead(store, "payments", "level_negative")
    dlq = _toolkit(groups, store)
    page = dlq.list_page(GROUP, None, 10, EVERYTHING)
    assert [m.msg_id for m in page.messages] == [first.msg_id, second.msg_id]
    assert [m.origin_topic for m in page.messages] == ["invoices", "payments"]
    assert (page.next_offset, page.max_offset) == (2, 2)
    only = dlq.list_page(GROUP, None, 10, DlqFilter(topic="payments")).messages
    assert [m.msg_id for m in only] == [second.msg_id]
    shown = dlq.show(GROUP, second.msg_id)
    assert shown.body == "dead from payments" and shown.dlq_reason == "level_negative"
    assert dlq.depth(GROUP) == 2 and store.record_count() == 2  # nothing written by reading


def test_resend_by_msg_id_goes_to_the_retry_topic_starting_over(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R16, R3
    dead, other = _dead(store), _dead(store)
    dlq = _toolkit(groups, store)
    result = dlq.resend(GROUP, {"msgIds": [dead.msg_id]}, "cli")
    assert (result.resent, result.skipped, result.target) == (1, 0, "retry")
    resent = [m for q in range(2) for m in store.messages(RETRY, q)]
    assert len(resent) == 1 and resent[0].msg_id == dead.msg_id
    copy = resent[0]
    assert copy.reconsume_times == 0 and copy.body == dead.body
    assert P.DLQ_REASON not in copy.properties and P.RECONSUME_TIME not in copy.properties
    assert copy.properties[P.RETRY_TOPIC] == "invoices"
    history = json.loads(copy.properties[P.RESEND_HISTORY])
    assert history[-1]["client"] == "cli" and history[-1]["target"] == "retry"
    assert [m.msg_id for m in dlq.list_page(GROUP, None, 10, EVERYTHING).messages] == [
        other.msg_id]  # the resent one is hidden, the other stays
    with pytest.raises(NotInDlq):
        dlq.resend(GROUP, {"msgIds": [dead.msg_id]}, "cli")  # already resent
    (record,) = [r for r in dlq.audit(GROUP, 10).records if r.action == "resend"]
    assert record.count == 1 and record.client == "cli"


def test_resend_all_to_the_origin_skips_what_has_no_origin(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R16
    a, b = _dead(store, "invoices"), _dead(store, "payments")
    orphan = _dead(store, origin=None)
    dlq = _toolkit(groups, store)
    result = dlq.resend(GROUP, {"all": True, "target": "origin"}, "ops")
    assert (result.resent, result.skipped) == (2, 1)
    assert [m.msg_id for m in store.messages("invoices")] == [a.msg_id]
    assert [m.msg_id for m in store.messages("payments")] == [b.msg_id]
    assert store.messages("invoices")[0].reconsume_times == 0
    left = dlq.list_page(GROUP, None, 10, EVERYTHING).messages
    assert [m.msg_id for m in left] == [orphan.msg_id] and dlq.depth(GROUP) == 1


def test_resend_all_in_batches_moves_every_message_once(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R16
    dead = [_dead(store) for _ in range(7)]
    dlq = _toolkit(groups, store, batch=3)
    assert dlq.resend(GROUP, {"all": True, "delayLevel": 2}, "ops").resent == 7
    parked = store.messages(naming.SCHEDULE_TOPIC, LEVELS.queue_id(2))
    assert sorted(m.msg_id for m in parked) == sorted(m.msg_id for m in dead)
    assert {m.properties[P.REAL_TOPIC] for m in parked} == {RETRY}
    assert dlq.depth(GROUP) == 0
    assert dlq.resend(GROUP, {"all": True}, "ops").resent == 0  # nothing twice


def test_a_group_without_retry_queues_cannot_resend_into_them(
        store: MemoryStore) -> None:  # SPEC R2, R16
    groups = MemoryGroupStore()
    groups.put(GROUP, GroupSettings(retry_queue_nums=0))
    dead = _dead(store)
    with pytest.raises(NoRetryTopic) as info:
        _toolkit(groups, store).resend(GROUP, {"msgIds": [dead.msg_id]}, "cli")
    assert info.value.http_status == 409
    assert store.record_count() == 1 and store.topic(RETRY) is None


def test_a_store_that_refuses_writes_resends_nothing(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R2, R16
    _dead(store)
    store.writable = False
    dlq = _toolkit(groups, store)
    with pytest.raises(NoPermission):
        dlq.resend(GROUP, {"all": True}, "cli")
    assert store.record_count() == 1 and dlq.depth(GROUP) == 1


def test_purge_by_filter_then_all(store: MemoryStore,
                                  groups: MemoryGroupStore) -> None:  # SPEC R16
    _dead(store, "invoices"), _dead(store, "payments"), _dead(store, "payments")
    dlq = _toolkit(groups, store)
    assert dlq.purge(GROUP, {"filter": {"topic": "payments"}}, "ops").purged == 2
    assert [m.origin_topic for m in dlq.list_page(GROUP, None, 10, EVERYTHING).messages] == [
        "invoices"]
    assert dlq.purge(GROUP, {"all": True}, "ops").purged == 1
    assert dlq.depth(GROUP) == 0 and dlq.list_page(GROUP, None, 10, EVERYTHING).messages == []
    assert store.record_count() == 3  # the CommitLog is append-only: hidden, not deleted
    assert [r.count for r in dlq.audit(GROUP, 10).records if r.action == "purge"] == [2, 1]


def test_two_shards_each_keep_and_resend_their_own_dead_letters(
        groups: MemoryGroupStore) -> None:  # DEC-store-shards, SPEC R16
    zero, one = MemoryStore(shard=0), MemoryStore(shard=1, host="127.0.0.1:8082")
    dlq = _toolkit(groups, zero, one)
    _dead(zero), _dead(one), _dead(one)
    assert dlq.depth(GROUP) == 3
    page = dlq.list_page(GROUP, None, 10, EVERYTHING)
    assert [m.shard for m in page.messages] == [0, 1, 1]
    one.writable = False
    result = dlq.resend(GROUP, {"all": True, "target": "origin"}, "ops")
    assert result.resent == 1 and [f.shard for f in (result.failed or [])] == [1]
    assert len(zero.messages("invoices")) == 1 and one.messages("invoices") == []
    assert dlq.depth(GROUP) == 2
