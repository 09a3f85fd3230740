"""A message's lifecycle timeline (SPEC O1, R16; DEC-message-history), spoken by the store,
the client SDK, the CLI and the console:

- ``GET /v1/messages/{msgId}/history`` -> :class:`MessageHistory`

Every stored copy of a message (``GET /v1/messages/{msgId}``) read as the hops of its life, in
the order the store appended them: produced, parked (a level or a ``deliverAt``), handed over
(with its lateness), stored, sent back (reason, attempt, next time), each retry copy, the dead
letter, each resend, rescheduled, cancelled; each hop with its time and its copy's
topic/queue/offset, and, for each copy a consumer group may read, whether the group consumed it
(its committed offset on the copy's queue is past the copy's queue offset). ``groups`` sums
each group up: consumed, not yet, retrying or dead (RocketMQ's message track states).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import WireValue, wire_meta

PRODUCED = "produced"
PARKED = "parked"
HANDED_OVER = "handed_over"
STORED = "stored"
SENT_BACK = "sent_back"
RETRY = "retry"
DEAD_LETTER = "dead_letter"
RESENT = "resent"
RESCHEDULED = "rescheduled"
CANCELLED = "cancelled"
PARKED_ERROR = "parked_error"
HOP_KINDS = (PRODUCED, PARKED, HANDED_OVER, STORED, SENT_BACK, RETRY, DEAD_LETTER, RESENT,
             RESCHEDULED, CANCELLED, PARKED_ERROR)
"""What a hop is: produced (the producer's send), parked (a delayed copy waiting in the
schedule topic or the timer log), handed over (the delayed copy delivered to its topic),
stored (a copy appended to its topic at once), sent back (a consumer's failure parked a retry
copy, R7), retry (that copy delivered to ``%RETRY%<group>``), dead letter (R6), resent (a DLQ
resend's copy, R16), rescheduled (a new delivery time, T1), cancelled, parked error (D7)."""

CONSUMED = "consumed"
NOT_YET = "not_yet"
RETRYING = "retrying"
DEAD = "dead"
GROUP_STATES = (CONSUMED, NOT_YET, RETRYING, DEAD)
"""A group's state for one copy (consumed, not yet) or for the whole message (also retrying:
a retry copy waits or is not consumed yet; dead: its last copy for the group is a dead letter
not resent)."""

PENDING = "pending"
DELIVERED = "delivered"
PARKED_STATES = (PENDING, DELIVERED, CANCELLED, RESCHEDULED)
"""Where a parked copy stands: waiting, handed over, cancelled, replaced by a reschedule."""


@dataclass(frozen=True, slots=True)
class GroupState(WireValue):
    """A consumer group's state for a copy (its committed offset on the copy's queue), or for
    the message."""

    group: str
    state: str = field(metadata=wire_meta(schema={"enum": list(GROUP_STATES)}))
    committed_offset: int | None = field(default=None, metadata=wire_meta(
        doc="the group's committed offset on the copy's queue (null: none committed)"))


@dataclass(frozen=True, slots=True)
class Hop(WireValue):
    """One step of a message's life. ``time`` is when it happened (epoch ms; the copy's store
    time, the producer's send time for ``produced``, the resend's time for ``resent``, the
    cancel's store time for ``cancelled``; null when the store has none: a cancel stored before
    the store indexed its record by the message's id). The copy fields name the stored copy the
    hop is (none for ``produced`` and ``cancelled``)."""

    kind: str = field(metadata=wire_meta(schema={"enum": list(HOP_KINDS)}))
    time: int | None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commitlog_offset: int | None = field(default=None, metadata=wire_meta(
        json="commitLogOffset"))
    offset_msg_id: str | None = None
    real_topic: str | None = field(default=None, metadata=wire_meta(
        doc="parked and sent-back copies: the topic it will be handed over to"))
    group: str | None = field(default=None, metadata=wire_meta(
        doc="the consumer group of a send-back, retry, dead letter or resend"))
    level: int | None = field(default=None, metadata=wire_meta(doc="the delay level (L1)"))
    deliver_at: int | None = field(default=None, metadata=wire_meta(
        doc="when a parked copy is due (epoch ms)"))
    lateness_ms: int | None = field(default=None, metadata=wire_meta(
        doc="handed over: store time minus due time (D10)"))
    attempt: int | None = field(default=None, metadata=wire_meta(
        doc="the copy's reconsumeTimes"))
    reason: str | None = None
    host: str | None = field(default=None, metadata=wire_meta(doc="produced: the producer's "
                                                                 "host (bornHost)"))
    client: str | None = field(default=None, metadata=wire_meta(doc="resent: who asked"))
    target: str | None = field(default=None, metadata=wire_meta(doc="resent: where to"))
    state: str | None = field(default=None, metadata=wire_meta(
        doc="parked copies: where they stand", schema={"enum": [*PARKED_STATES, None]}))
    trace_id: str | None = field(default=None, metadata=wire_meta(
        doc="the W3C trace id the copy carries (traceparent, O1)"))
    groups: list[GroupState] | None = field(default=None, metadata=wire_meta(
        doc="copies a group reads: each group's state for this copy"))


@dataclass(frozen=True, slots=True)
class MessageHistory(WireValue):
    """A message's lifecycle timeline: its hops oldest first and each group's state."""

    msg_id: str
    topic: str | None = field(metadata=wire_meta(doc="the topic the producer sent to"))
    keys: str
    tags: str | None
    hops: list[Hop]
    groups: list[GroupState] = field(metadata=wire_meta(
        doc="each consumer group's state for the message now"))
    copies: int = field(metadata=wire_meta(doc="stored copies read"))
    complete: bool = field(metadata=wire_meta(
        doc="false when the store holds more copies than one look-up reads (the newest "
            "are missing), so the timeline may stop early"))
