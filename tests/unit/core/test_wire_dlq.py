"""The DLQ toolkit's and the retry service's values as wire types (SPEC R16):
each round-trips through to_json/from_json, and a bad value is refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.dlq import (
    AuditRecord,
    AuditWhat,
    DlqAudit,
    DlqFilter,
    DlqMessage,
    DlqPage,
    DlqPurge,
    DlqResend,
    FailureEntry,
    PurgeResult,
    ResendEntry,
    ResendResult,
)
from clepsydra_core.wire.groups import GroupNames
from clepsydra_core.wire.retry import RetryHealth

MSG_ID = "0A0B0C0D0E0F00000000000000000001"
STORED: dict[str, Any] = {
    "msgId": MSG_ID, "offsetMsgId": "7F000001000000000000000000000010", "topic": "%DLQ%g",
    "queueId": 0, "queueOffset": 3, "commitLogOffset": 16, "tags": None, "keys": "k",
    "flag": 0, "properties": {"RETRY_TOPIC": "T"}, "storeTimestamp": 5, "bornTimestamp": 4,
    "bornHost": "127.0.0.1:1", "storeHost": "127.0.0.1:2", "reconsumeTimes": 16,
    "sysFlag": 0, "bodySize": 2, "body": "hi"}

VALUES: list[WireValue] = [
    DlqResend(msg_ids=[MSG_ID], target="origin"),
    DlqResend(all=True, delay_level=3, max_per_second=2.5),
    DlqResend(filter=DlqFilter(topic="T", to_ms=9)),
    DlqPurge(all=True),
    DlqPurge(msg_ids=[MSG_ID]),
    ResendResult(4, 1, "retry"),
    PurgeResult(7),
    DlqAudit([AuditRecord(1, "resend", AuditWhat(msg_ids=[MSG_ID], msg_id_count=1,
                                                 target="retry", delay_level=0), 1, "cli"),
              AuditRecord(2, "purge", AuditWhat(all=True), 3, "cli", error="store down")]),
    DlqPage([DlqMessage.from_json({**STORED, "originTopic": "T", "attempts": 2})], 4, 4),
    DlqMessage.from_json({**STORED, "failureHistory": [
        {"time": 1, "consumer": "c", "reason": "boom", "reconsumeTimes": 0}],
        "resendHistory": [{"time": 2, "client": "cli", "group": "g", "target": "retry"}]}),
    FailureEntry(unparsed="[oops"),
    ResendEntry(time=1),
    GroupNames(["a", "b"]),
    RetryHealth("degraded", False, True, False),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(value: WireValue) -> None:
    raw = value.to_json()
    assert type(value).from_json(raw) == value
    assert type(value).from_json(raw).to_json() == raw


def test_dlq_message_is_the_store_view_plus_the_dlq_fields() -> None:
    message = DlqMessage.from_json({**STORED, "originTopic": "T", "dlqReason": "max"})
    raw = message.to_json()
    assert {k: raw[k] for k in STORED} == STORED
    assert (raw["originTopic"], raw["dlqReason"], raw["attempts"], raw["resends"]) == (
        "T", "max", 0, 0)


@pytest.mark.parametrize(("cls", "raw", "words"), [
    (DlqResend, {"all": True, "target": "elsewhere"}, "resend.target"),
    (DlqResend, {"all": True, "maxPerSecond": 0}, "resend.maxPerSecond"),
    (DlqResend, {"all": True, "maxPerSecond": "fast"}, "resend.maxPerSecond must be a number"),
    (DlqResend, {"all": True, "delayLevel": -1}, "resend.delayLevel"),
    (DlqResend, {"all": True, "target": "origin", "delayLevel": 2}, "resend.delayLevel"),
    (DlqResend, {"msgIds": []}, "resend.msgIds must hold 1 to"),
    (DlqResend, {"msgIds": [1]}, "resend.msgIds[0] must be a string"),
    (DlqResend, {"filter": {"bogus": 1}}, "resend.filter: unknown field 'bogus'"),
    (DlqResend, {"all": True, "msgIds": [MSG_ID]}, "exactly one of msgIds"),
    (DlqPurge, {"all": "yes"}, "purge.all must be a boolean"),
    (DlqPurge, {"target": "retry", "all": True}, "purge: unknown field 'target'"),
    (DlqPurge, {}, "exactly one of msgIds"),
])
def test_bad_requests_name_the_field(cls: type[WireValue], raw: dict[str, Any],
                                     words: str) -> None:
    name = "resend" if cls is DlqResend else "purge"
    with pytest.raises(ValidationError, match=words.replace("[", r"\[").replace("]", r"\]")):
        cls.from_json(raw, what=name, strict=True)


def test_msg_ids_keep_their_own_error_code() -> None:
    with pytest.raises(ValidationError) as err:
        DlqPurge.from_json({"msgIds": ["z z"]}, what="purge", strict=True)
    assert err.value.code == "INVALID_MSG_ID"


@pytest.mark.parametrize(("cls", "raw", "words"), [
    (ResendResult, {"resent": 1, "skipped": "x", "target": "retry"}, "ResendResult.skipped"),
    (PurgeResult, {}, "PurgeResult.purged is required"),
    (AuditRecord, {"time": 1, "action": "purge", "what": {"msgIdCount": "1"}, "count": 1,
                   "client": "c"}, "AuditRecord.what.msgIdCount"),
    (DlqPage, {"messages": [{}], "nextOffset": 0}, r"DlqPage.messages\[0\].msgId"),
    (RetryHealth, {"status": "ok", "redis": 1, "store": True, "storeWritable": True},
     "RetryHealth.redis must be a boolean"),
    (GroupNames, {"groups": "a"}, "GroupNames.groups must be an array"),
])
def test_bad_answers_name_the_field(cls: type[WireValue], raw: dict[str, Any],
                                    words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        cls.from_json(raw)
