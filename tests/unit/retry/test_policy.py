"""The pure send-back decision (SPEC R2-R8): no store, no Redis, no Flask."""

from __future__ import annotations

import json
import random

import pytest

from clepsydra_core import properties as P
from clepsydra_core.levels import DelayLevels
from clepsydra_core.retry_rules import ORDERLY_MAX_RECONSUME_TIMES
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_core.wire.retry import SendBackRequest
from clepsydra_retry import policy
from clepsydra_retry.policy import (
    Decision,
    GroupSettings,
    Outcome,
    StoredHeaders,
    decide,
)

LEVELS = DelayLevels.default()  # 18 levels
GROUP = "orders"
NOW_MS = 1_700_000_000_000


def headers(reconsume_times: int = 0, topic: str = "Orders", **props: str) -> StoredHeaders:
    return StoredHeaders(msg_id="7F00000100001F91000000000000ABCD", topic=topic,
                         commitlog_offset=0xABCD, reconsume_times=reconsume_times,
                         properties=dict(props))


def run(request: SendBackRequest | None = None, stored: StoredHeaders | None = None,
        settings: GroupSettings | None = None, queues: int = 1, seed: int = 7) -> Decision:
    return decide(settings or GroupSettings(), stored or headers(), request or SendBackRequest(),
                  group=GROUP, levels=LEVELS, retry_queue_count=queues,
                  rng=random.Random(seed), now_ms=NOW_MS)


def test_defaults_are_one_queue_and_sixteen_retries() -> None:  # SPEC R3, R5
    assert GroupSettings() == GroupSettings(retry_queue_nums=1, retry_max_times=16)


def test_zero_retry_queues_drops_with_nothing_to_write() -> None:  # SPEC R2
    decision = run(settings=GroupSettings(retry_queue_nums=0))
    assert decision.outcome == Outcome.DROPPED
    assert decision.topic is None and decision.set_properties == {}
    assert decision.answer(None).to_json() == {"outcome": "DROPPED", "topic": None,
                                               "delayLevel": None, "msgId": None}


def test_first_retry_goes_to_retry_topic_at_level_three() -> None:  # SPEC R7, R3
    decision = run()
    assert decision.outcome == Outcome.RETRY
    assert decision.topic == "%RETRY%orders"
    assert decision.delay_level == 3
    assert decision.queue_id == 0
    assert decision.reconsume_times == 1  # SPEC R8


@pytest.mark.parametrize("reconsume_times", range(16))
def test_level_zero_means_three_plus_reconsume_times(reconsume_times: int) -> None:  # SPEC R7
    decision = run(stored=headers(reconsume_times))
    assert decision.delay_level == min(3 + reconsume_times, LEVELS.max_level)
    assert decision.reconsume_times == reconsume_times + 1


def test_default_ladder_waits_as_the_spec_lists() -> None:  # SPEC R7
    waits = [LEVELS.delay_ms(run(stored=headers(n)).delay_level) for n in range(16)]
    spec = "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert waits == list(DelayLevels.parse(spec).delays_ms)


def test_level_zero_is_clamped_to_the_table() -> None:  # SPEC R7, L2
    short = DelayLevels.parse("1s 2s 3s 4s")
    decision = decide(GroupSettings(retry_max_times=100), headers(10), SendBackRequest(),
                      group=GROUP, levels=short, retry_queue_count=1, rng=random.Random(),
                      now_ms=NOW_MS)
    assert decision.delay_level == 4


@pytest.mark.parametrize(("asked", "used"), [(1, 1), (5, 5), (18, 18), (40, 18)])
def test_positive_level_is_used_as_given_clamped(asked: int, used: int) -> None:  # R7, L2
    assert run(SendBackRequest(delay_level=asked), headers(9)).delay_level == used


def test_reaching_max_reconsume_times_dead_letters() -> None:  # SPEC R6
    decision = run(stored=headers(16))
    assert decision.outcome == Outcome.DLQ
    assert decision.topic == "%DLQ%orders"
    assert decision.queue_id == 0 and decision.delay_level == 0  # one queue, not delayed
    assert decision.set_properties[P.DLQ_REASON] == policy.DLQ_REASON_MAX_TIMES
    assert decision.reconsume_times == 17


def test_one_below_max_still_retries() -> None:  # SPEC R6
    assert run(stored=headers(15)).outcome == Outcome.RETRY


def test_negative_level_dead_letters_at_once() -> None:  # SPEC R6, R11
    decision = run(SendBackRequest(delay_level=-1))
    assert decision.outcome == Outcome.DLQ
    assert decision.set_properties[P.DLQ_REASON] == policy.DLQ_REASON_LEVEL_NEGATIVE
    assert decision.answer("X").to_json() == {"outcome": "DLQ", "topic": "%DLQ%orders",
                                      "delayLevel": 0, "msgId": "X"}


def test_request_max_overrides_group_setting() -> None:  # SPEC R5
    assert run(SendBackRequest(max_reconsume_times=2), headers(2)).outcome == Outcome.DLQ
    assert run(SendBackRequest(max_reconsume_times=20), headers(16)).outcome == Outcome.RETRY
    decision = run(SendBackRequest(max_reconsume_times=20), headers(16))
    assert decision.set_properties[P.MAX_RECONSUME_TIMES] == "20"


def test_group_max_applies_when_request_says_nothing() -> None:  # SPEC R5
    settings = GroupSettings(retry_max_times=3)
    assert run(stored=headers(2), settings=settings).outcome == Outcome.RETRY
    decision = run(stored=headers(3), settings=settings)
    assert decision.outcome == Outcome.DLQ
    assert decision.max_reconsume_times == 3
    assert decision.set_properties[P.MAX_RECONSUME_TIMES] == "3"


def test_zero_max_dead_letters_the_first_failure() -> None:  # SPEC R5, R6
    assert run(SendBackRequest(max_reconsume_times=0)).outcome == Outcome.DLQ


def test_max_of_minus_one_means_the_group_default() -> None:
    # SPEC R5: RocketMQ's -1 is "the default", not "dead-letter at once"
    settings = GroupSettings(retry_max_times=5)
    asked = SendBackRequest(max_reconsume_times=-1)
    assert run(asked, headers(0), settings=settings).outcome == Outcome.RETRY
    assert run(asked, headers(4), settings=settings).outcome == Outcome.RETRY
    decision = run(asked, headers(5), settings=settings)
    assert decision.outcome == Outcome.DLQ and decision.max_reconsume_times == 5
    assert run(asked, headers(15)).outcome == Outcome.RETRY  # default group: 16


def test_any_negative_level_dead_letters() -> None:  # SPEC R6
    for level in (-1, -2, -(2**31)):
        decision = run(SendBackRequest(delay_level=level))
        assert decision.outcome == Outcome.DLQ
        assert decision.set_properties[P.DLQ_REASON] == policy.DLQ_REASON_LEVEL_NEGATIVE


def test_orderly_max_is_practically_unlimited() -> None:  # SPEC R5
    limit = ORDERLY_MAX_RECONSUME_TIMES
    assert run(SendBackRequest(max_reconsume_times=limit), headers(1000)).outcome == Outcome.RETRY


def test_retry_topic_property_set_on_first_retry_only() -> None:  # SPEC R4
    first = run()
    assert first.set_properties[P.RETRY_TOPIC] == "Orders"
    later = run(stored=headers(3, topic="%RETRY%orders", RETRY_TOPIC="Orders"))
    assert P.RETRY_TOPIC not in later.set_properties  # kept as stored, never overwritten


def test_origin_topic_from_request_when_message_sits_in_a_retry_topic() -> None:  # SPEC R4
    decision = run(SendBackRequest(origin_topic="Orders"), headers(1, topic="%RETRY%orders"))
    assert decision.set_properties[P.RETRY_TOPIC] == "Orders"
    # but the stored topic wins for an ordinary topic (the message's own topic)
    assert run(SendBackRequest(origin_topic="Other")).set_properties[P.RETRY_TOPIC] == "Orders"


def test_origin_message_id_set_once() -> None:  # SPEC R8
    assert run().set_properties[P.ORIGIN_MESSAGE_ID] == headers().msg_id
    kept = run(stored=headers(2, ORIGIN_MESSAGE_ID="FIRST"))
    assert P.ORIGIN_MESSAGE_ID not in kept.set_properties


def test_other_properties_are_left_to_the_store_copy() -> None:  # SPEC R8
    decision = run(stored=headers(0, app="x", TAGS="t", KEYS="k1 k2"))
    assert not {"app", P.TAGS, P.KEYS} & set(decision.set_properties)
    assert decision.remove_properties == ()


def test_stale_markers_are_removed() -> None:  # SPEC R8, D9
    stored = headers(1, SCHEDULE_OFFSET="4:17", DELIVER_TS="1", DLQ_REASON="old")
    retry = run(stored=stored)
    assert set(retry.remove_properties) == {P.SCHEDULE_OFFSET, P.DELIVER_TS, P.DLQ_REASON}
    dead = run(SendBackRequest(delay_level=-1), stored)
    assert P.DLQ_REASON not in dead.remove_properties  # overwritten instead
    assert dead.set_properties[P.DLQ_REASON] == policy.DLQ_REASON_LEVEL_NEGATIVE


def test_reconsume_time_property_follows_the_count_when_present() -> None:  # SPEC R8, R10
    assert P.RECONSUME_TIME not in run().set_properties
    assert run(stored=headers(4, RECONSUME_TIME="4")).set_properties[P.RECONSUME_TIME] == "5"


def test_queue_is_chosen_at_random_among_retry_queues() -> None:  # SPEC R3
    chosen = {run(settings=GroupSettings(retry_queue_nums=4), queues=4, seed=s).queue_id
              for s in range(60)}
    assert chosen == {0, 1, 2, 3}


def test_failure_history_appends_each_attempt() -> None:  # R16 Beyond
    first = run(SendBackRequest(reason="ValueError: bad", consumer_id="c1"))
    history = json.loads(first.set_properties[P.FAILURE_HISTORY])
    assert history == [{"time": NOW_MS, "consumer": "c1", "reason": "ValueError: bad",
                        "reconsumeTimes": 0}]
    second = run(SendBackRequest(reason="KeyError: k", consumer_id="c2"),
                 headers(1, FAILURE_HISTORY=first.set_properties[P.FAILURE_HISTORY]))
    history = json.loads(second.set_properties[P.FAILURE_HISTORY])
    assert [h["consumer"] for h in history] == ["c1", "c2"]
    assert [h["reconsumeTimes"] for h in history] == [0, 1]


def test_failure_history_is_bounded_and_reasons_cut() -> None:  # R16 Beyond, P1
    raw = None
    for n in range(40):
        raw = policy.append_history(raw, {"reconsumeTimes": n, "reason": "x" * 5000})
    history = json.loads(raw or "")
    assert len(history) == policy.HISTORY_MAX_ENTRIES
    assert history[-1]["reconsumeTimes"] == 39 and history[0]["reconsumeTimes"] == 8
    long = run(SendBackRequest(reason="y" * 10_000))
    entry = json.loads(long.set_properties[P.FAILURE_HISTORY])[0]
    assert len(entry["reason"]) == policy.REASON_MAX_CHARS


def test_unreadable_failure_history_is_kept_not_lost() -> None:  # R16 Beyond
    decision = run(stored=headers(1, FAILURE_HISTORY="not json"))
    history = json.loads(decision.set_properties[P.FAILURE_HISTORY])
    assert history[0] == {"unparsed": "not json"} and len(history) == 2
    assert policy.parse_history(None) == []
    assert policy.parse_history('{"a": 1}') == [{"unparsed": '{"a": 1}'}]


def test_dead_letter_carries_history_and_retry_topic() -> None:  # SPEC R6, R4, R16
    decision = run(SendBackRequest(delay_level=-1, reason="boom"))
    assert decision.set_properties[P.RETRY_TOPIC] == "Orders"
    assert json.loads(decision.set_properties[P.FAILURE_HISTORY])[0]["reason"] == "boom"


def _view(**fields: object) -> StoredMessage:
    """The store's message view (headers only) as the retry service reads it."""
    return StoredMessage.from_json({
        "msgId": "AB", "offsetMsgId": "AB", "topic": "T", "queueId": 0, "queueOffset": 0,
        "commitLogOffset": 12, "tags": None, "keys": "", "flag": 0, "properties": {},
        "storeTimestamp": 1, "bornTimestamp": 1, "bornHost": "h:1", "storeHost": "h:2",
        "reconsumeTimes": 0, "sysFlag": 0, "bodySize": 0, **fields})


def test_headers_from_the_stores_message_view() -> None:
    stored = StoredHeaders.of(_view(reconsumeTimes=3, properties={"a": "b"}))
    assert stored == StoredHeaders("AB", "T", 12, 3, {"a": "b"}, "AB")
    copy = StoredHeaders.of(_view(msgId="U1", offsetMsgId="AB"))
    assert copy.offset_msg_id == "AB" and copy.named_by("u1") and copy.named_by("ab")
    assert not copy.named_by("CD")
