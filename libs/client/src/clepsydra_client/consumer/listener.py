"""What a push-consumer application implements and gets back: listener outcomes and contexts
(SPEC R11, R12), message models (C1, C2) and where a new group starts.

Concurrent listener::

    def on_messages(messages: list[Message], context: ConcurrentContext) -> ConsumeResult:
        ...
        context.delay_level_when_next_consume = 5   # R11: -1 DLQ, 0 broker decides, >0 level
        return ConsumeResult.RECONSUME_LATER

Raising an exception counts as RECONSUME_LATER; its type and text are the failure reason.
Returning None counts as SUCCESS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from clepsydra_client.message import Message, MessageQueue


class ConsumeResult(StrEnum):
    """Outcome of a concurrent listener call (R11)."""

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class OrderlyResult(StrEnum):
    """Outcome of an orderly listener call (R12)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(StrEnum):
    CLUSTERING = "CLUSTERING"
    """Each queue has one owner in the group (C1); failures are retried through the broker."""
    BROADCASTING = "BROADCASTING"
    """Every consumer gets every message (C2); failures are logged and skipped (R14)."""


class ConsumeFromWhere(StrEnum):
    """Where a queue with no committed offset starts (C1)."""

    LAST = "LAST"
    """At the queue's end: only messages sent from now on (the default) - except on a young
    queue (nothing deleted yet, at most ``young_queue_limit`` entries), which starts at 0."""
    FIRST = "FIRST"
    """At the queue's minimum offset: everything the store still holds."""


@dataclass(slots=True)
class ConcurrentContext:
    """Passed to a concurrent listener; the listener may change the two settings."""

    queue: MessageQueue
    delay_level_when_next_consume: int = 0
    """R11: -1 straight to the DLQ, 0 the broker decides (3 + reconsumeTimes), > 0 that level."""
    ack_index: int = 2**31 - 1
    """On SUCCESS, messages after this index of the batch are treated as failed."""
    failure_reason: str | None = None
    """Why the listener asked to reconsume later (sent with the send-back)."""


@dataclass(slots=True)
class OrderlyContext:
    queue: MessageQueue
    suspend_current_queue_time_ms: int = -1
    """How long to suspend the queue after a failure; -1 uses the consumer's setting."""
    failure_reason: str | None = None


ConcurrentListener = Callable[[list[Message], ConcurrentContext], ConsumeResult | None]
OrderlyListener = Callable[[list[Message], OrderlyContext], OrderlyResult | None]
