"""The DLQ toolkit answers through its wire types (SPEC R16): a dead letter's view
is the store's message view plus the DLQ's fields, its histories typed, an entry that cannot be
read kept as text."""

from __future__ import annotations

import json
from typing import Any

from clepsydra_core import properties as P
from clepsydra_core.wire.dlq import DlqMessage, FailureEntry, ResendEntry
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry.dlq import summarize

STORED: dict[str, Any] = {
    "msgId": "0A0B0C0D0E0F00000000000000000001",
    "offsetMsgId": "7F000001000000000000000000000010", "topic": "%DLQ%g", "queueId": 0,
    "queueOffset": 3, "commitLogOffset": 16, "tags": "t", "keys": "", "flag": 0,
    "storeTimestamp": 5, "bornTimestamp": 4, "bornHost": "h:1", "storeHost": "h:2",
    "reconsumeTimes": 16, "sysFlag": 0, "bodySize": 2, "body": "hi"}


def _dead(**props: str) -> StoredMessage:
    return StoredMessage.from_json({**STORED, "properties": props})


def test_summary_counts_attempts_and_resends() -> None:
    history = json.dumps([{"time": 1, "consumer": "c", "reason": "boom", "reconsumeTimes": 0},
                          {"time": 2, "consumer": "c", "reason": "again",
                           "reconsumeTimes": 1}])
    view = summarize(_dead(**{P.RETRY_TOPIC: "T", P.DLQ_REASON: "max retries",
                              P.FAILURE_HISTORY: history}))
    assert isinstance(view, DlqMessage)
    assert (view.origin_topic, view.dlq_reason, view.attempts, view.resends) == (
        "T", "max retries", 2, 0)
    assert view.failure_history is None and "failureHistory" not in view.to_json()


def test_shown_alone_the_histories_are_typed_and_odd_entries_kept_as_text() -> None:
    resends = json.dumps([{"time": 9, "client": "cli", "group": "g", "target": "origin"}])
    view = summarize(_dead(**{P.FAILURE_HISTORY: "[not json",
                              P.RESEND_HISTORY: resends}), histories=True)
    assert view.failure_history == [FailureEntry(unparsed="[not json")]
    assert view.resend_history == [ResendEntry(9, "cli", "g", "origin")]
    odd = summarize(_dead(**{P.FAILURE_HISTORY: json.dumps(["text", {"time": "x"}])}),
                    histories=True)
    assert odd.failure_history == [FailureEntry(unparsed='"text"'),
                                   FailureEntry(unparsed='{"time": "x"}')]
