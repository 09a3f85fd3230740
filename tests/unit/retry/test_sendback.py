"""Send-back (SPEC R1-R8) against the retry service's ports (``clepsydra_retry.ports``),
with the in-memory store of ``tests/fixtures/retry.py``: R2's checks in order, each refusing
with nothing written; where the copy goes (R3, R6, R7) and what it keeps and changes (R4, R5,
R8); a batch with one copy call per shard; a message on another store shard written there
(DEC-store-shards)."""

from __future__ import annotations

import json
import random

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import GroupNotFound, NoPermission
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.retry import SendBackAnswer
from clepsydra_retry.groups import MemoryGroupStore
from clepsydra_retry.policy import DLQ_REASON_LEVEL_NEGATIVE, DLQ_REASON_MAX_TIMES, Outcome
from clepsydra_retry.sendback import SendBackMessageNotFound, SendBackService
from tests.fixtures.retry import MemoryShards, MemoryStore

GROUP = "orders-consumer"
TOPIC = "orders"
RETRY = naming.retry_topic(GROUP)
DLQ = naming.dlq_topic(GROUP)
LEVELS = DelayLevels.default()


@pytest.fixture
def groups() -> MemoryGroupStore:
    found = MemoryGroupStore()
    found.put(GROUP, GroupSettings(retry_queue_nums=3, retry_max_times=4))
    return found


def _service(groups: MemoryGroupStore, *stores: MemoryStore,
             auto_create: bool = True) -> SendBackService:
    return SendBackService(groups, MemoryShards(*stores), LEVELS, rng=random.Random(7),
                           clock_ms=lambda: 1_700_000_123_000, auto_create_groups=auto_create)


def _parked(store: MemoryStore, level: int) -> list:
    return store.messages(naming.SCHEDULE_TOPIC, LEVELS.queue_id(level))


# ---- R2: the checks, in order, each with nothing written ----------------------------------
def test_unknown_group_is_refused_when_groups_are_not_created_on_first_use(
        store: MemoryStore) -> None:  # SPEC R2 (1)
    msg = store.produce(TOPIC)
    service = _service(MemoryGroupStore(), store, auto_create=False)
    with pytest.raises(GroupNotFound) as info:
        service.send_back("nobody", {"commitLogOffset": msg.commitlog_offset})
    assert info.value.code == "SUBSCRIPTION_GROUP_NOT_EXIST"
    assert store.record_count() == 1 and store.topic(naming.retry_topic("nobody")) is None


def test_a_store_that_refuses_writes_is_no_permission_before_the_group_has_retry_queues(
        store: MemoryStore) -> None:  # SPEC R2 (2) before (3)
    msg = store.produce(TOPIC)
    store.writable = False
    groups = MemoryGroupStore()
    groups.put(GROUP, GroupSettings(retry_queue_nums=0))
    with pytest.raises(NoPermission) as info:
        _service(groups, store).send_back(GROUP, {"commitLogOffset": msg.commitlog_offset})
    assert info.value.code == "NO_PERMISSION" and info.value.rule == "R2"
    assert store.record_count() == 1 and store.topic(RETRY) is None


def test_no_retry_queues_is_success_with_nothing_written(store: MemoryStore) -> None:  # R2 (3)
    msg = store.produce(TOPIC)
    groups = MemoryGroupStore()
    groups.put(GROUP, GroupSettings(retry_queue_nums=0))
    answer = _service(groups, store).send_back(GROUP, {"commitLogOffset": msg.commitlog_offset})
    assert answer.outcome == Outcome.DROPPED and answer.msg_id is None
    assert store.record_count() == 1 and store.topic(RETRY) is None
    assert groups.send_back_counts(GROUP) == {Outcome.DROPPED: 1}


def test_a_missing_message_is_system_error_naming_the_offset(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R2 (5)
    store.produce(TOPIC)
    with pytest.raises(SendBackMessageNotFound) as info:
        _service(groups, store).send_back(GROUP, {"commitLogOffset": 12_345})
    assert (info.value.code, info.value.http_status) == ("SYSTEM_ERROR", 404)
    assert "12345" in str(info.value)
    assert store.record_count() == 1  # the retry topic may exist (R2 (4)), no message


def test_a_msg_id_that_names_another_record_is_not_found(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R2 (5)
    first, second = store.produce(TOPIC), store.produce(TOPIC)
    with pytest.raises(SendBackMessageNotFound):
        _service(groups, store).send_back(GROUP, {"commitLogOffset": first.commitlog_offset,
                                                  "msgId": second.msg_id})
    assert store.record_count() == 2


# ---- where the copy goes and what it carries -----------------------------------------------
def test_first_failure_goes_to_the_retry_topic_at_level_3_keeping_the_message(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R3, R4, R7, R8
    msg = store.produce(TOPIC, "the body", properties={"color": "red"})
    answer = _service(groups, store).send_back(
        GROUP, {"commitLogOffset": msg.commitlog_offset, "reason": "boom"})
    assert (answer.outcome, answer.topic, answer.delay_level) == (Outcome.RETRY, RETRY, 3)
    assert len(store.topic(RETRY).queues) == 3  # R3: created with retryQueueNums queues
    (copy,) = _parked(store, 3)  # R7: level 3 + reconsumeTimes 0, parked (S1)
    props = copy.properties
    assert props[P.REAL_TOPIC] == RETRY and 0 <= int(props[P.REAL_QID]) < 3
    assert props[P.RETRY_TOPIC] == TOPIC  # R4
    assert props[P.ORIGIN_MESSAGE_ID] == msg.msg_id  # R8
    assert props[P.MAX_RECONSUME_TIMES] == "4"  # R5: the group's retryMaxTimes
    assert props["color"] == "red" and copy.body == "the body"  # R8: body, properties kept
    assert (copy.flag, copy.born_timestamp, copy.born_host, copy.sys_flag) == (
        msg.flag, msg.born_timestamp, msg.born_host, msg.sys_flag)
    assert copy.reconsume_times == msg.reconsume_times + 1  # R8
    assert answer.msg_id == copy.msg_id == msg.msg_id  # the unique id stays
    assert json.loads(props[P.FAILURE_HISTORY])[-1]["reason"] == "boom"
    assert groups.send_back_counts(GROUP) == {Outcome.RETRY: 1}


def test_the_retry_topic_keeps_its_origin_across_retries(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R4, R7
    msg = store.produce(TOPIC)
    service = _service(groups, store)
    service.send_back(GROUP, {"commitLogOffset": msg.commitlog_offset})
    (first,) = _parked(store, 3)
    again = store.produce(RETRY, properties=dict(first.properties), reconsume_times=1)
    answer = service.send_back(GROUP, {"commitLogOffset": again.commitlog_offset})
    assert answer.delay_level == 4  # 3 + reconsumeTimes 1
    (second,) = _parked(store, 4)
    assert second.properties[P.RETRY_TOPIC] == TOPIC and second.reconsume_times == 2
    assert second.properties[P.ORIGIN_MESSAGE_ID] == msg.msg_id


def test_a_level_the_consumer_chose_is_used_as_given(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R7
    msg = store.produce(TOPIC)
    answer = _service(groups, store).send_back(
        GROUP, {"commitLogOffset": msg.commitlog_offset, "delayLevel": 9})
    assert answer.delay_level == 9 and len(_parked(store, 9)) == 1


@pytest.mark.parametrize(("reconsume", "body", "reason"), [
    (4, {}, DLQ_REASON_MAX_TIMES),  # R6: reconsumeTimes >= the group's retryMaxTimes
    (1, {"maxReconsumeTimes": 1}, DLQ_REASON_MAX_TIMES),  # R5: the request's maximum wins
    (0, {"delayLevel": -1}, DLQ_REASON_LEVEL_NEGATIVE),  # R6: a level below 0
])
def test_dead_lettered_into_one_queue_undelayed(
        store: MemoryStore, groups: MemoryGroupStore, reconsume: int, body: dict,
        reason: str) -> None:  # SPEC R5, R6
    msg = store.produce(TOPIC, reconsume_times=reconsume)
    answer = _service(groups, store).send_back(
        GROUP, {"commitLogOffset": msg.commitlog_offset, **body})
    assert (answer.outcome, answer.topic) == (Outcome.DLQ, DLQ)
    assert len(store.topic(DLQ).queues) == 1
    (dead,) = store.messages(DLQ, 0)
    assert P.REAL_TOPIC not in dead.properties  # not parked: no delay
    assert dead.properties[P.DLQ_REASON] == reason
    assert dead.properties[P.RETRY_TOPIC] == TOPIC
    assert store.topic(naming.SCHEDULE_TOPIC) is None


def test_a_group_seen_first_is_created_with_the_defaults(store: MemoryStore) -> None:
    msg = store.produce(TOPIC)  # SPEC R3, R5 (CLEPSYDRA_AUTO_CREATE_GROUPS on)
    groups = MemoryGroupStore()
    _service(groups, store).send_back("new-group", {"commitLogOffset": msg.commitlog_offset})
    assert groups.get("new-group") == GroupSettings()
    assert len(store.topic(naming.retry_topic("new-group")).queues) == 1


def test_by_msg_id_alone_the_copy_is_found_by_the_store_look_up(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R1
    msg = store.produce(TOPIC)
    answer = _service(groups, store).send_back(GROUP, {"msgId": msg.msg_id})
    assert answer.outcome == Outcome.RETRY
    assert _parked(store, 3)[0].properties[P.ORIGIN_MESSAGE_ID] == msg.msg_id


# ---- batches and shards --------------------------------------------------------------------
def test_a_batch_is_one_copy_call_and_a_missing_message_fails_only_its_item(
        store: MemoryStore, groups: MemoryGroupStore) -> None:  # SPEC R1, R2 (5)
    a, b = store.produce(TOPIC), store.produce(TOPIC, reconsume_times=9)
    results = _service(groups, store).send_back_many(GROUP, [
        {"commitLogOffset": a.commitlog_offset}, {"commitLogOffset": 999_900},
        {"commitLogOffset": b.commitlog_offset}, {"bogus": 1}])
    assert isinstance(results[0], SendBackAnswer) and results[0].outcome == Outcome.RETRY
    assert isinstance(results[1], ErrorAnswer) and results[1].error == "SYSTEM_ERROR"
    assert isinstance(results[2], SendBackAnswer) and results[2].outcome == Outcome.DLQ
    assert isinstance(results[3], ErrorAnswer) and results[3].error == "INVALID_REQUEST"
    assert store.copy_calls == 1
    assert len(_parked(store, 3)) == 1 and len(store.messages(DLQ)) == 1


def test_a_message_on_another_shard_is_written_on_that_shard(
        groups: MemoryGroupStore) -> None:  # DEC-store-shards, SPEC R3
    zero, one = MemoryStore(shard=0), MemoryStore(shard=1, host="127.0.0.1:8082")
    service = _service(groups, zero, one)
    msg = one.produce(TOPIC)
    answer = service.send_back(GROUP, {"msgId": msg.offset_msg_id})
    assert answer.outcome == Outcome.RETRY
    assert len(_parked(one, 3)) == 1 and zero.topic(RETRY) is None
    again = one.produce(TOPIC)  # by its unique msgId alone: the look-up spans the shards
    assert service.send_back(GROUP, {"msgId": again.msg_id}).outcome == Outcome.RETRY
    assert len(_parked(one, 3)) == 2 and zero.topic(naming.SCHEDULE_TOPIC) is None
    one.writable = False  # R2 (2) per shard: shard 1 refuses, shard 0's item still goes
    other = zero.produce(TOPIC)
    results = service.send_back_many(GROUP, [{"msgId": msg.offset_msg_id},
                                             {"msgId": other.offset_msg_id}])
    assert isinstance(results[0], ErrorAnswer) and results[0].error == "NO_PERMISSION"
    assert isinstance(results[1], SendBackAnswer) and len(_parked(zero, 3)) == 1
