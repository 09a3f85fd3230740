"""The wire codec (clepsydra_core.wire, issue 13.1): one definition of each HTTP value, the
camelCase names in one place, a validation error that names the field."""

from __future__ import annotations

import dataclasses

import pytest

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue, camel, wire_meta
from clepsydra_core.wire.copy import (
    MAX_COPY_BATCH,
    ORIGIN,
    CopyBatch,
    CopyItem,
    RangeCopy,
    RangeCopyAnswer,
    SkippedCopy,
)
from clepsydra_core.wire.retry import SendBackAnswer, SendBackRequest
from clepsydra_core.wire.schedule import (
    MAX_HANDOVER,
    HandoverAnswer,
    HandoverRequest,
    LevelInfo,
    LevelTable,
    ScheduleEntries,
)


def test_camel_case_names() -> None:
    assert camel("queue_offset") == "queueOffset"
    assert camel("next_deliver_ts") == "nextDeliverTs"
    assert camel("level") == "level"


def test_handover_answer_has_the_documented_names_and_round_trips() -> None:
    answer = HandoverAnswer(level=3, from_offset=10, next_offset=12, delivered=1, parked=1,
                            skipped=0, not_due=True, next_deliver_ts=1_700_000_000_123,
                            lateness_ms=[4], handed_over=11)
    assert answer.to_json() == {
        "level": 3, "fromOffset": 10, "nextOffset": 12, "delivered": 1, "parked": 1,
        "skipped": 0, "notDue": True, "nextDeliverTs": 1_700_000_000_123, "latenessMs": [4],
        "handedOver": 11}
    assert HandoverAnswer.from_json(answer.to_json()) == answer


def test_nested_values_round_trip() -> None:
    table = LevelTable([LevelInfo(1, 1_000, 0, 0, 5, 4), LevelInfo(2, 5_000, 1, 2, 2, 1)])
    raw = table.to_json()
    assert raw["levels"][1] == {"level": 2, "delayMs": 5_000, "queueId": 1, "minOffset": 2,
                                "maxOffset": 2, "handedOver": 1}
    assert LevelTable.from_json(raw) == table
    entries = ScheduleEntries(1, 0, [1, 2, 3], 0, 3, -1)
    assert ScheduleEntries.from_json(entries.to_json()) == entries


def test_request_field_renamed_and_defaulted() -> None:
    assert HandoverRequest(5, 7).to_json() == {"fromOffset": 5, "max": 7}
    assert HandoverRequest.from_json({"fromOffset": 5}, strict=True) == HandoverRequest(5, 100)
    assert HandoverRequest.from_json({"fromOffset": 5, "max": None}) == HandoverRequest(5, 100)


@pytest.mark.parametrize(("raw", "words"), [
    ({}, "handover.fromOffset is required"),
    ({"fromOffset": "1"}, "handover.fromOffset must be an integer, got string"),
    ({"fromOffset": True}, "handover.fromOffset must be an integer, got boolean"),
    ({"fromOffset": -1}, "handover.fromOffset must be between 0 and"),
    ({"fromOffset": 0, "max": MAX_HANDOVER + 1}, "handover.max must be between 1 and 10000"),
    ({"fromOffset": 0, "mx": 1}, "handover: unknown field 'mx'"),
    ([], "handover must be an object, got array"),
])
def test_bad_requests_name_the_field(raw: object, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        HandoverRequest.from_json(raw, what="handover", strict=True)
    assert words in err.value.message


def test_answers_tolerate_new_fields_and_name_nested_errors() -> None:
    raw = LevelTable([LevelInfo(1, 1_000, 0, 0, 5, 4)]).to_json()
    raw["levels"][0]["future"] = "ignored"
    assert LevelTable.from_json(raw).levels[0].level == 1
    raw["levels"][0]["maxOffset"] = None
    with pytest.raises(ValidationError,
                       match=r"LevelTable.levels\[0\].maxOffset must be an integer, got null"):
        LevelTable.from_json(raw)
    with pytest.raises(ValidationError, match=r"deliverTs\[1\] must be an integer"):
        ScheduleEntries.from_json({**ScheduleEntries(1, 0, [1], 0, 1, -1).to_json(),
                                   "deliverTs": [1, "2"]})


def test_internal_fields_stay_off_the_wire() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithSecret(WireValue):
        visible_count: int
        secret: str = dataclasses.field(default="", metadata=wire_meta(internal=True))

    assert WithSecret(1, "x").to_json() == {"visibleCount": 1}
    assert WithSecret.from_json({"visibleCount": 2, "secret": "y"}) == WithSecret(2)


def test_copy_items_leave_unset_optionals_out_and_bound_the_batch() -> None:
    item = CopyItem(42, "%RETRY%G", delay_level=3, set_properties={"RETRY_TOPIC": "orders"})
    assert item.to_json() == {"commitLogOffset": 42, "topic": "%RETRY%G", "delayLevel": 3,
                              "setProperties": {"RETRY_TOPIC": "orders"},
                              "removeProperties": [], "appendProperties": {}}
    assert CopyBatch.from_json(CopyBatch([item]).to_json()) == CopyBatch([item])
    with pytest.raises(ValidationError, match=r"copy.items must hold 1 to 1000 items, got 0"):
        CopyBatch.from_json({"items": []}, what="copy")
    too_many = {"items": [item.to_json()] * (MAX_COPY_BATCH + 1)}
    with pytest.raises(ValidationError, match="got 1001"):
        CopyBatch.from_json(too_many, what="copy")
    with pytest.raises(ValidationError, match=r"copy.items\[0\].queueId must be between 0"):
        CopyBatch.from_json({"items": [{**item.to_json(), "queueId": -1}]}, what="copy")


def test_range_copy_target_origin_means_each_message_home() -> None:
    home = RangeCopy(topic="%DLQ%G", queue_id=0, from_offset=5, target=ORIGIN)
    assert home.target_topic is None and home.to_json()["max"] == MAX_COPY_BATCH
    assert RangeCopy("%DLQ%G", 0, 5, "%RETRY%G").target_topic == "%RETRY%G"
    answer = RangeCopyAnswer(1, ["id1"], [SkippedCopy(6, "id2", "no RETRY_TOPIC")], 7, None)
    assert answer.to_json()["skipped"] == [{"queueOffset": 6, "msgId": "id2",
                                            "reason": "no RETRY_TOPIC"}]
    assert answer.to_json()["lastCommitLogOffset"] is None  # required, so present as null
    assert RangeCopyAnswer.from_json(answer.to_json()) == answer


def test_send_back_request_names_and_bounds() -> None:
    # SPEC R1, R5, R6: any level below 0 dead-letters; a max of -1 means the default
    request = SendBackRequest(commitlog_offset=7, delay_level=-1, max_reconsume_times=3,
                              reason="ValueError: bad", topic="orders", queue_id=1,
                              queue_offset=9)
    raw = request.to_json()
    assert raw == {"commitLogOffset": 7, "delayLevel": -1, "maxReconsumeTimes": 3,
                   "reason": "ValueError: bad", "topic": "orders", "queueId": 1,
                   "queueOffset": 9}
    assert SendBackRequest.from_json(raw, strict=True) == request
    assert set(request.without_hints().to_json()) == {"commitLogOffset", "delayLevel",
                                                      "maxReconsumeTimes", "reason"}
    assert SendBackRequest.from_json({"commitLogOffset": 1, "delayLevel": -2}).delay_level == -2
    with pytest.raises(ValidationError, match=r"send-back.maxReconsumeTimes must be between -1"):
        SendBackRequest.from_json({"commitLogOffset": 1, "maxReconsumeTimes": -2},
                                  what="send-back")
    with pytest.raises(ValidationError, match=r"send-back: unknown field 'delaylevel'"):
        SendBackRequest.from_json({"commitLogOffset": 1, "delaylevel": 2}, what="send-back",
                                  strict=True)
    dropped = SendBackAnswer("DROPPED", None, None, None)
    assert dropped.to_json() == {"outcome": "DROPPED", "topic": None, "delayLevel": None,
                                 "msgId": None}


def test_level_backlog_starts_after_the_mark_and_never_below_the_minimum() -> None:
    # SPEC D8, D9: derived once here for the SDK, the scheduler's metrics and the autoscaler
    assert (LevelInfo(1, 1_000, 0, 0, 10, 3).first_pending,
            LevelInfo(1, 1_000, 0, 0, 10, 3).backlog) == (4, 6)
    assert LevelInfo(1, 1_000, 0, 7, 10, -1).first_pending == 7  # old segments deleted
    assert LevelInfo(1, 1_000, 0, 0, 10, 9).backlog == 0
    assert LevelInfo(1, 1_000, 0, 0, 0, -1).backlog == 0
