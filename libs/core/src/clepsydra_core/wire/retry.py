"""The retry service's send-back routes (SPEC R1-R8; DESIGN "Retry"), spoken by the retry
service and the client SDK:

- ``POST /v1/groups/{group}/send-back`` :class:`SendBackRequest` -> :class:`SendBackAnswer`
- ``POST /v1/groups/{group}/send-back/batch`` :class:`SendBackBatch` (the service reads it as
  :class:`SendBackItems`: each item on its own) -> :class:`SendBackResults`, one per item, in
  order
- ``GET /healthz`` -> :class:`RetryHealth`
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from clepsydra_core.msgid import ID_PATTERN, MAX_SHARD
from clepsydra_core.retry_rules import ORDERLY_MAX_RECONSUME_TIMES, USE_DEFAULT_MAX
from clepsydra_core.wire.codec import INT32_MAX, INT32_MIN, WireValue, wire_meta
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.schema import non_null
from clepsydra_core.wire.topics import topic_meta

MAX_SEND_BACK_BATCH = 1000
"""Most items one batch send-back takes."""
PULL_HINTS = ("topic", "queueId", "queueOffset")
"""The fields that say where a consumer pulled the message (hints for the service's reads)."""


@dataclass(frozen=True, slots=True)
class SendBackRequest(WireValue):
    """A consumer returns a message it failed (R1): by ``msg_id`` or ``commitlog_offset``,
    with the level it wants (0: the ladder decides, R7; below 0: straight to the DLQ, R6), the
    most retries it allows (R5), where it pulled the message from (optional hints, all three
    or none) and why it failed (kept in the message's failure history)."""
    # ``DLQ_LEVEL`` (-1) is what the SDK sends to dead-letter; any negative level does it.

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {
        "oneOf": [non_null("msgId"), non_null("commitLogOffset")],
        "allOf": [{"if": non_null(hint), "then": non_null(*PULL_HINTS)}
                  for hint in PULL_HINTS],
        "description": "msgId or commitLogOffset (both are taken only when they name the same "
                       "message); topic, queueId and queueOffset together or none.",
    }

    commitlog_offset: int | None = field(
        default=None, metadata=wire_meta(json="commitLogOffset", minimum=0))
    msg_id: str | None = field(default=None, metadata=wire_meta(
        pattern=ID_PATTERN, code="INVALID_MSG_ID",
        doc="the message's msgId or one copy's offsetMsgId (with commitLogOffset: that "
            "record's msgId or offsetMsgId). A msgId alone is looked up in the store: the copy "
            "whose offsetMsgId it is, else the one at topic/queueId/queueOffset, else the "
            "newest copy the group consumes"))
    delay_level: int = field(default=0, metadata=wire_meta(minimum=INT32_MIN,
                                                           maximum=INT32_MAX))
    """R6: any level below 0 dead-letters (RocketMQ's rule); 0: the ladder (R7)."""
    max_reconsume_times: int | None = field(
        default=None, metadata=wire_meta(minimum=USE_DEFAULT_MAX,
                                         maximum=ORDERLY_MAX_RECONSUME_TIMES))
    """R5: None or -1: the group's retryMaxTimes; 0: dead-letter on this failure."""
    origin_topic: str | None = None
    reason: str | None = None
    consumer_id: str | None = None
    topic: str | None = field(default=None, metadata=topic_meta(
        "where the message was pulled from (with queueId and queueOffset)"))
    queue_id: int | None = field(default=None, metadata=wire_meta(minimum=0,
                                                                  maximum=INT32_MAX))
    queue_offset: int | None = field(default=None, metadata=wire_meta(minimum=0))
    traceparent: str | None = None
    """The W3C context of the consume attempt that failed: a batch carries several attempts'
    send-backs in one call, so each item names its own (SPEC O1)."""
    shard: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=MAX_SHARD,
        doc="the store shard that holds the message (where it was pulled from; "
            "DEC-store-shards): the send-back is written there. Absent: the shard its "
            "msgId names when that is an offsetMsgId, else shard 0"))

    def without_hints(self) -> SendBackRequest:
        """The same request without the pull hints (for a service that has no batch route)."""
        return replace(self, topic=None, queue_id=None, queue_offset=None)


@dataclass(frozen=True, slots=True)
class SendBackBatch(WireValue):
    items: list[SendBackRequest] = field(
        metadata=wire_meta(min_items=1, max_items=MAX_SEND_BACK_BATCH))


@dataclass(frozen=True, slots=True)
class SendBackAnswer(WireValue):
    """What became of a send-back: ``RETRY`` (a copy in ``%RETRY%<group>``, parked for
    ``delay_level``), ``DLQ`` (in ``%DLQ%<group>``) or ``DROPPED`` (the group has no retry
    queues, R2); ``msg_id`` is the message's msgId, which the new copy keeps (None when
    dropped)."""

    outcome: str
    topic: str | None
    delay_level: int | None
    msg_id: str | None


@dataclass(frozen=True, slots=True)
class SendBackItems(WireValue):
    """SendBackBatch as the service reads it: each item is checked on its own, and one that is
    not a SendBackRequest gets its {error, message} in the answer while the others are sent
    back."""

    items: list[Any] = field(metadata=wire_meta(
        min_items=1, max_items=MAX_SEND_BACK_BATCH,
        schema={"items": {"anyOf": [{"$ref": "#/components/schemas/SendBackRequest"}, {}]}}))


@dataclass(frozen=True, slots=True)
class SendBackResults(WireValue):
    """One result per item, in order: what became of it, or why it was not sent back."""

    results: list[SendBackAnswer | ErrorAnswer]


@dataclass(frozen=True, slots=True)
class RetryHealth(WireValue):
    """Healthy (200) while Redis answers (else 503, ``degraded``); the store's state is
    reported."""

    status: str = field(metadata=wire_meta(schema={"enum": ["ok", "degraded"]}))
    redis: bool
    store: bool
    store_writable: bool
