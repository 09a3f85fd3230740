"""The wire codec (clepsydra_core.wire): one definition of each HTTP value, the
camelCase names in one place, a validation error that names the field."""

from __future__ import annotations

import base64 as _b64
import dataclasses
import re as _re

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core import validation
from clepsydra_core.errors import ValidationError
from clepsydra_core.msgid import MSG_ID_PATTERN, decode_msg_id
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
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_core.wire.groups import GroupSettingsPatch, Heartbeat
from clepsydra_core.wire.produce import ProduceBatch, ProduceMessage
from clepsydra_core.wire.retry import SendBackAnswer, SendBackRequest
from clepsydra_core.wire.schedule import (
    MAX_HANDOVER,
    HandoverAnswer,
    HandoverRequest,
    LevelInfo,
    LevelTable,
    ScheduleEntries,
)
from clepsydra_core.wire.schema import nested_types, object_schema
from clepsydra_core.wire.topics import TopicCreate


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


# ---- the contracts the OpenAPI documents come from ----------------------

def _matches(pattern: str, text: str) -> bool:
    """JSON Schema's reading of a pattern (ECMA-262: ``$`` is the very end)."""
    found = _re.search(pattern, text)
    return found is not None and found.end() == len(text)


_NAME_CHARS = st.sampled_from([*"aZ09_|-%\n .", "%RETRY%", "%DLQ%", "%SCHEDULE_ERROR%"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_NAME_CHARS, max_size=8).map("".join) | st.text(max_size=130))
def test_topic_and_group_patterns_are_the_name_rules(name: str) -> None:
    # P1: the documents' patterns accept exactly what the servers' checks accept
    def accepted(check: object) -> bool:
        try:
            check(name)  # type: ignore[operator]
        except ValidationError:
            return False
        return True
    assert (_matches(validation.TOPIC_PATTERN, name) and len(name) <= validation.TOPIC_MAX_LEN
            ) == accepted(validation.validate_topic_name)
    assert (_matches(validation.GROUP_PATTERN, name) and len(name) <= validation.GROUP_MAX_LEN
            ) == accepted(validation.validate_group_name)


@given(st.text(alphabet="0123456789abcdefABCDEFx", min_size=30, max_size=33))
def test_msg_id_pattern_is_what_decodes(text: str) -> None:
    try:
        decode_msg_id(text)
        decodes = True
    except ValidationError:
        decodes = False
    assert _matches(MSG_ID_PATTERN, text) == decodes
    if decodes:
        assert decode_msg_id(text).commitlog_offset >= 0  # never a negative offset


def _validator(cls: type[WireValue]) -> jsonschema.Draft202012Validator:
    """The JSON Schema the documents carry for ``cls`` (requests: closed), with its nested
    types as $defs."""
    defs = {c.__name__: object_schema(c, lambda c: {"$ref": f"#/$defs/{c.__name__}"},
                                      closed=True) for c in nested_types(cls)}
    schema = object_schema(cls, lambda c: {"$ref": f"#/$defs/{c.__name__}"}, closed=True)
    return jsonschema.Draft202012Validator({**schema, "$defs": defs})


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**64, 2**64)
                     | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
_MESSAGE_FIELDS = st.sampled_from(["body", "bodyBase64", "tags", "keys", "properties",
                                   "queueId", "delayLevel", "flag", "bornTimestamp", "topic"])
_VALUES = (st.sampled_from(["", "x", "QQ==", "!!", "a b", "KEYS", "DELAY"]) | st.none()
           | st.integers(-2**31 - 1, 2**31) | st.sampled_from([1.0, 1.5, True])
           | st.lists(st.sampled_from(["k", "", "a b"]), max_size=2)
           | st.dictionaries(st.sampled_from(["p", "", "KEYS", "UNIQ_KEY"]),
                             st.sampled_from(["v", 1]), max_size=2) | _JSON)


def _reads(cls: type[WireValue], raw: object) -> bool:
    try:
        cls.from_json(raw, strict=True)
    except ValidationError:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(_MESSAGE_FIELDS, _VALUES, max_size=5) | _JSON)
def test_produce_schema_accepts_what_the_wire_type_reads(raw: object) -> None:
    # the document and the server agree on every shape rule: exclusive bodies, patterns,
    # ranges, reserved property names, nulls as absent, unknown fields
    assert _validator(ProduceMessage).is_valid(raw) == _reads(ProduceMessage, raw), raw


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "queues", "retryQueueNums", "retryMaxTimes",
                                        "clientId", "subscriptions", "messageModel", "topic",
                                        "fromMs", "toMs", "key"]), _VALUES, max_size=3))
def test_request_schemas_accept_what_the_wire_types_read(raw: dict[str, object]) -> None:
    for cls in (TopicCreate, GroupSettingsPatch, Heartbeat, DlqFilter):
        assert _validator(cls).is_valid(raw) == _reads(cls, raw), (cls.__name__, raw)


def test_produce_message_errors_name_the_field_and_keep_their_codes() -> None:
    def code(raw: object) -> str:
        with pytest.raises(ValidationError) as err:
            ProduceMessage.from_json(raw, what="message", strict=True)
        return err.value.code
    assert code({"body": "a", "bodyBase64": "YQ=="}) == "BODY_AND_BASE64"
    assert code({"tags": "a"}) == "MISSING_BODY"
    assert code({"bodyBase64": "!!"}) == "INVALID_BASE64"
    assert code({"body": "a", "delayLevel": -1}) == "INVALID_DELAY_LEVEL"
    assert code({"body": "a", "delayLevel": "1"}) == "INVALID_REQUEST"
    assert code({"body": "a", "properties": ["x"]}) == "INVALID_PROPERTIES"
    assert code({"body": "a", "topic": "t"}) == "INVALID_REQUEST"  # not a message field
    m = ProduceMessage.from_json({"bodyBase64": _b64.b64encode(b"\xff").decode(),
                                  "keys": ["a", "b"], "queueId": 2.0}, strict=True)
    assert (m.keys, m.queue_id) == (["a", "b"], 2)  # an integral number is an integer


def test_nested_requests_refuse_unknown_fields_too() -> None:
    with pytest.raises(ValidationError, match=r"batch.messages\[0\]: unknown field 'x'"):
        ProduceBatch.from_json({"messages": [{"body": "a", "x": 1}]}, what="batch", strict=True)
    assert ProduceBatch.from_json({"messages": [{"body": "a", "x": 1}]}).messages[0].body == "a"


def test_a_dlq_filter_selects_something() -> None:
    with pytest.raises(ValidationError, match="filter is empty"):
        DlqFilter.from_json({"topic": None}, what="filter")
    assert DlqFilter.from_json({"fromMs": 5, "toMs": 5}).to_json() == {"fromMs": 5, "toMs": 5}


def test_a_batch_of_encoded_messages_is_the_batch_of_their_values() -> None:
    """``ProduceBatch.of_encoded`` (the SDK's send_async) joins messages encoded in
    chunks into the same request as ``of_json``; an empty chunk adds nothing."""
    messages = [ProduceMessage.json_of(body=f"m{i}", keys=f"k{i}", properties={"a": "b"})
                for i in range(5)]
    parts = [orjson.dumps(messages[:2]), orjson.dumps([]), orjson.dumps(messages[2:])]
    encoded = orjson.dumps(ProduceBatch.of_encoded(parts))
    assert orjson.loads(encoded) == ProduceBatch.of_json(messages)
    assert ProduceBatch.from_json(orjson.loads(encoded), strict=True).messages[4].body == "m4"
