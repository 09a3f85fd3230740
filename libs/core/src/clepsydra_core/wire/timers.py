"""The store's timer routes (SPEC T1-T2), spoken by the store, the scheduler and the
client SDK and CLI:

- ``DELETE /v1/messages/{msgId}`` -> 200 :class:`MessageCancelled`; 409 ``ALREADY_DELIVERED``;
  404 ``MESSAGE_NOT_FOUND``
- ``PATCH /v1/messages/{msgId}`` :class:`RescheduleRequest` -> 200 :class:`MessageRescheduled`;
  the same 409 / 404
- ``DELETE /v1/messages?topic=&key=`` -> 200 :class:`KeyCancelled`;
  ``PATCH /v1/messages?topic=&key=`` :class:`RescheduleRequest` -> 200 :class:`KeyRescheduled`
  (every pending delayed message of the topic with that key; 409 when every one was already
  delivered, 404 when none is known)
- ``GET /v1/schedule/timers`` -> :class:`TimerBacklog`

A produce message's ``deliverAt`` / ``delayMs`` are fields of
:class:`clepsydra_core.wire.produce.ProduceMessage`; the answer of a timer message carries its
effective ``deliverAt`` (:class:`clepsydra_core.wire.produce.ProduceAnswer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from clepsydra_core.errors import AlreadyDelivered, ValidationError
from clepsydra_core.wire.codec import WireValue, wire_meta
from clepsydra_core.wire.schedule import FENCE_DOC, MAX_FENCE

CANCELLED = "cancelled"
"""``status`` of a cancel's answer."""
RESCHEDULED = "rescheduled"
"""``status`` of a reschedule's answer."""
ALREADY_DELIVERED = AlreadyDelivered.code
"""Error code (409) of a cancel or reschedule of a message already handed to its topic."""

MAX_DELAY_MS = 100 * 365 * 86_400_000
"""The longest delay any store takes (a hundred years): ``CLEPSYDRA_TIMER_MAX_DELAY``, the
store's own cap, is at most this (default 365 days)."""
MAX_DELIVER_AT = 4_102_444_800_000
"""The latest delivery time on the wire: 2100-01-01T00:00Z (the store's cap refuses earlier)."""

_DELIVER_AT_DOC = ("epoch ms to deliver at; a time in the past delivers now; at most "
                   "CLEPSYDRA_TIMER_MAX_DELAY ahead (default 365 days), else 400 (SPEC T1)")
_DELAY_MS_DOC = ("delay from now, ms; at most CLEPSYDRA_TIMER_MAX_DELAY (default 365 days), "
                 "else 400 (SPEC T1)")


def deliver_at_meta() -> dict[str, object]:
    """Wire metadata of a ``deliverAt`` request field (produce, reschedule)."""
    return wire_meta(minimum=0, maximum=MAX_DELIVER_AT, rule="T1", doc=_DELIVER_AT_DOC)


def delay_ms_meta() -> dict[str, object]:
    """Wire metadata of a ``delayMs`` request field (produce, reschedule)."""
    return wire_meta(minimum=0, maximum=MAX_DELAY_MS, rule="T1", doc=_DELAY_MS_DOC)


_INT = {"type": "integer"}


@dataclass(frozen=True, slots=True)
class RescheduleRequest(WireValue):
    """A new delivery time: exactly one of ``deliverAt`` and ``delayMs``."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {
        "oneOf": [{"required": ["deliverAt"], "properties": {"deliverAt": _INT}},
                  {"required": ["delayMs"], "properties": {"delayMs": _INT}}],
    }

    deliver_at: int | None = field(default=None, metadata=deliver_at_meta())
    delay_ms: int | None = field(default=None, metadata=delay_ms_meta())

    def wire_check(self, name: str) -> None:
        if (self.deliver_at is None) == (self.delay_ms is None):
            raise ValidationError(f"{name}: give exactly one of deliverAt and delayMs",
                                  rule="T1", code="INVALID_REQUEST")

    def target_ms(self, now_ms: int) -> int:
        """The asked delivery time, epoch ms (before the store's cap and 'past is now')."""
        if self.deliver_at is not None:
            return self.deliver_at
        assert self.delay_ms is not None
        return now_ms + self.delay_ms


@dataclass(frozen=True, slots=True)
class MessageCancelled(WireValue):
    """A pending delayed message taken back: it will never be delivered."""

    status: str = field(metadata=wire_meta(schema={"enum": [CANCELLED]}))
    msg_id: str


@dataclass(frozen=True, slots=True)
class MessageRescheduled(WireValue):
    """A pending delayed message's new delivery time (a level message becomes a timer one;
    its msgId stays)."""

    status: str = field(metadata=wire_meta(schema={"enum": [RESCHEDULED]}))
    msg_id: str
    deliver_at: int = field(metadata=wire_meta(doc="the effective delivery time, epoch ms"))


UNREACHABLE_DOC = ("store shards that did not answer (pending messages of the key there were "
                   "not changed)")


@dataclass(frozen=True, slots=True)
class KeyCancelled(WireValue):
    """Every pending delayed message of a topic with a key, taken back."""

    status: str = field(metadata=wire_meta(schema={"enum": [CANCELLED]}))
    msg_ids: list[str]
    unreachable: list[int] | None = field(default=None, metadata=wire_meta(doc=UNREACHABLE_DOC))


@dataclass(frozen=True, slots=True)
class KeyRescheduled(WireValue):
    """Every pending delayed message of a topic with a key, given one new delivery time."""

    status: str = field(metadata=wire_meta(schema={"enum": [RESCHEDULED]}))
    msg_ids: list[str]
    deliver_at: int = field(metadata=wire_meta(doc="the effective delivery time, epoch ms"))
    unreachable: list[int] | None = field(default=None, metadata=wire_meta(doc=UNREACHABLE_DOC))


@dataclass(frozen=True, slots=True)
class HourCount(WireValue):
    """Pending timers due in hour ``hour`` from now (0: within the next hour; past-due ones
    count in hour 0)."""

    hour: int
    count: int


@dataclass(frozen=True, slots=True)
class Lateness(WireValue):
    """Store timestamp of a delivered copy minus its intended time, ms, over recent hand-overs
    (SPEC D10, T2)."""

    p50: int
    p99: int
    max: int


@dataclass(frozen=True, slots=True)
class TimerBacklog(WireValue):
    """The store's timer backlog (``GET /v1/schedule/timers``)."""

    pending: int
    """Timers stored, neither delivered nor cancelled."""
    by_hour_ahead: list[HourCount]
    """Non-empty hours only, nearest first."""
    handed_over: int
    """Timers handed to their real topic since the store's files were made."""
    next_due_at: int | None
    """Epoch ms of the earliest pending timer; null when none is pending."""
    lateness: Lateness | None
    """Null before the first hand-over the store remembers."""


MAX_TIMER_HANDOVER = 10_000
"""Most timers one hand-over call hands over."""
MAX_WAIT_MS = 2_000
"""Longest a hand-over call waits for a timer to fall due (the scheduler waits up to 1 s, a
quarter of its lease, and renews between calls)."""


@dataclass(frozen=True, slots=True)
class TimerHandoverRequest(WireValue):
    """``POST /v1/schedule/timers/handover`` (the scheduler's): hand over up to ``max`` due
    timers; when none is due, wait up to ``waitMs`` for one (never early, SPEC T1)."""

    max_count: int = field(default=1000, metadata=wire_meta(
        json="max", minimum=1, maximum=MAX_TIMER_HANDOVER))
    wait_ms: int = field(default=0, metadata=wire_meta(minimum=0, maximum=MAX_WAIT_MS))
    fence: int | None = field(default=None, metadata=wire_meta(minimum=0, maximum=MAX_FENCE,
                                                              doc=FENCE_DOC))
    """The timers' lease's fencing token (DEC-scheduler-lease); None: not checked."""


@dataclass(frozen=True, slots=True)
class TimerHandoverAnswer(WireValue):
    """What a timer hand-over did (SPEC D4, D7, D9, D10 for timers)."""

    delivered: int
    parked: int
    """Moved to %SCHEDULE_ERROR% (D7)."""
    next_due_at: int | None
    """Epoch ms of the earliest pending timer after this call; null when none is pending."""
    lateness_ms: list[int]
    """Store timestamp of each delivered copy minus its deliver time (D10)."""
