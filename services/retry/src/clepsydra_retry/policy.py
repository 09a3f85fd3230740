"""The send-back decision (SPEC R2-R8), pure: no Flask, no Redis, no HTTP.

Given a group's settings, the stored message's headers and the consumer's request, :func:`decide`
says where the message goes next (retry topic, DLQ, or nowhere), at which level, with which
reconsumeTimes and which properties changed. The caller performs the one copy the decision
describes; randomness (the retry queue choice, R3) and the clock come in as arguments.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels
from clepsydra_core.retry_rules import max_reconsume_times_or, retry_level_for
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_core.wire.retry import SendBackAnswer, SendBackRequest

HISTORY_MAX_ENTRIES = P.LIST_MAX_ENTRIES
"""Failure history keeps the newest attempts only, so properties stay bounded (P1)."""
REASON_MAX_CHARS = P.UNPARSED_MAX_CHARS
"""A failure reason longer than this is cut (exception texts can be huge)."""

DLQ_REASON_MAX_TIMES = "max_reconsume_times"
DLQ_REASON_LEVEL_NEGATIVE = "level_negative"

STALE_ON_COPY = (P.DLQ_REASON, P.SCHEDULE_OFFSET, P.DELIVER_TS)
"""Properties of a former life that a copy must not carry: the dead-letter reason of an
earlier DLQ stay, and the schedule hand-over markers of an earlier delivery (D9, D10)."""


class Outcome(StrEnum):
    RETRY = "RETRY"
    DLQ = "DLQ"
    DROPPED = "DROPPED"


@dataclass(frozen=True, slots=True)
class StoredHeaders:
    """What the decision needs of the stored message (its headers; the body stays in the store)."""

    msg_id: str
    """The message's unique id, the same in every copy."""
    topic: str
    commitlog_offset: int
    reconsume_times: int
    properties: dict[str, str] = field(default_factory=dict)
    offset_msg_id: str = ""
    """Where this copy is stored."""

    @classmethod
    def of(cls, message: StoredMessage) -> StoredHeaders:
        """From the store's message view (``GET /v1/commitlog/{offset}?body=false``)."""
        return cls(msg_id=message.msg_id, topic=message.topic,
                   commitlog_offset=message.commitlog_offset,
                   reconsume_times=message.reconsume_times,
                   properties=dict(message.properties),
                   offset_msg_id=message.offset_msg_id or message.msg_id)

    def named_by(self, msg_id: str) -> bool:
        """True when ``msg_id`` is this copy's msgId or its offsetMsgId."""
        wanted = msg_id.upper()
        return wanted in (self.msg_id.upper(), self.offset_msg_id.upper())


@dataclass(frozen=True, slots=True)
class Decision:
    """Where the message goes and how the copy differs from the stored message."""

    outcome: Outcome
    topic: str | None = None
    queue_id: int | None = None
    delay_level: int = 0
    reconsume_times: int = 0
    max_reconsume_times: int = 0
    set_properties: dict[str, str] = field(default_factory=dict)
    remove_properties: tuple[str, ...] = ()
    dlq_reason: str | None = None

    def answer(self, msg_id: str | None) -> SendBackAnswer:
        """The send-back answer (DESIGN "Retry")."""
        return SendBackAnswer(
            outcome=str(self.outcome), topic=self.topic, msg_id=msg_id,
            delay_level=self.delay_level if self.outcome != Outcome.DROPPED else None)


DROPPED = Decision(outcome=Outcome.DROPPED)


def drops_retries(settings: GroupSettings) -> bool:
    """R2: a group with no retry queues accepts send-backs and writes nothing."""
    return settings.retry_queue_nums == 0


def max_reconsume_times(settings: GroupSettings, request: SendBackRequest) -> int:
    """R5: the request's value when given (0: dead-letter now), else - absent or -1 - the
    group's retryMaxTimes."""
    return max_reconsume_times_or(request.max_reconsume_times, settings.retry_max_times)


def retry_level(request_level: int, reconsume_times: int, levels: DelayLevels) -> int:
    """R7: 0 -> 3 + reconsumeTimes, > 0 -> as given; both clamped to the table's max (L2)."""
    level = retry_level_for(reconsume_times) if request_level == 0 else request_level
    return levels.clamp(level)


def origin_topic(headers: StoredHeaders, request: SendBackRequest) -> str:
    """R4: the topic the message was first produced to. Kept in RETRY_TOPIC after the first
    retry; before that it is the message's own topic (or the request's originTopic when the
    message already sits in a system topic without RETRY_TOPIC, e.g. an R9 fallback)."""
    kept = headers.properties.get(P.RETRY_TOPIC)
    if kept:
        return kept
    if naming.is_system_topic(headers.topic) and request.origin_topic:
        return request.origin_topic
    return headers.topic


def append_history(raw: str | None, entry: dict[str, Any],
                   max_entries: int = HISTORY_MAX_ENTRIES) -> str:
    """The FAILURE_HISTORY JSON list with ``entry`` appended, newest ``max_entries`` kept.
    Text that is not a JSON list (a client may set the property) is kept as one entry."""
    return P.append_to_list(raw, entry, max_entries)


def parse_history(raw: str | None) -> list[Any]:
    """The attempts recorded in a FAILURE_HISTORY property ([] when absent or unreadable)."""
    if not raw:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return [{"unparsed": raw}]
    return parsed if isinstance(parsed, list) else [{"unparsed": raw}]


def history_entry(headers: StoredHeaders, request: SendBackRequest, now_ms: int) -> dict[str, Any]:
    """One failed attempt: when, by which consumer, why, and which attempt it was."""
    reason = request.reason[:REASON_MAX_CHARS] if request.reason else None
    return {"time": now_ms, "consumer": request.consumer_id, "reason": reason,
            "reconsumeTimes": headers.reconsume_times}


def decide(settings: GroupSettings, headers: StoredHeaders, request: SendBackRequest, *,
           group: str, levels: DelayLevels, retry_queue_count: int, rng: random.Random,
           now_ms: int, history_max: int = HISTORY_MAX_ENTRIES) -> Decision:
    """R2 (drop), R4-R8: the decision for one send-back of a message that exists.

    ``retry_queue_count`` is how many queues the retry topic really has (R3: the group's
    retryQueueNums when the service created it)."""
    if drops_retries(settings):
        return DROPPED
    max_times = max_reconsume_times(settings, request)
    props = headers.properties
    changes: dict[str, str] = {P.MAX_RECONSUME_TIMES: str(max_times)}
    if P.RETRY_TOPIC not in props:
        changes[P.RETRY_TOPIC] = origin_topic(headers, request)
    if P.ORIGIN_MESSAGE_ID not in props:
        changes[P.ORIGIN_MESSAGE_ID] = headers.msg_id
    changes[P.FAILURE_HISTORY] = append_history(
        props.get(P.FAILURE_HISTORY), history_entry(headers, request, now_ms), history_max)
    reconsume_times = headers.reconsume_times + 1
    if P.RECONSUME_TIME in props:
        changes[P.RECONSUME_TIME] = str(reconsume_times)
    stale = tuple(name for name in STALE_ON_COPY if name in props)

    if headers.reconsume_times >= max_times or request.delay_level < 0:
        reason = DLQ_REASON_LEVEL_NEGATIVE if request.delay_level < 0 else DLQ_REASON_MAX_TIMES
        changes[P.DLQ_REASON] = reason
        return Decision(
            outcome=Outcome.DLQ, topic=naming.dlq_topic(group), queue_id=0, delay_level=0,
            reconsume_times=reconsume_times, max_reconsume_times=max_times,
            set_properties=changes,
            remove_properties=tuple(n for n in stale if n != P.DLQ_REASON), dlq_reason=reason,
        )
    return Decision(
        outcome=Outcome.RETRY, topic=naming.retry_topic(group),
        queue_id=rng.randrange(max(retry_queue_count, 1)),
        delay_level=retry_level(request.delay_level, headers.reconsume_times, levels),
        reconsume_times=reconsume_times, max_reconsume_times=max_times,
        set_properties=changes, remove_properties=stale,
    )
