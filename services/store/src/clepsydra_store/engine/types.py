"""Values the engine takes and returns (no Flask here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from clepsydra_core.records import CommitLogRecord
from clepsydra_core.wire.codec import wire_meta
from clepsydra_core.wire.copy import RangeCopyAnswer
from clepsydra_core.wire.schedule import HandoverAnswer


class PutStatus(StrEnum):
    OK = "OK"
    FLUSH_TIMEOUT = "FLUSH_TIMEOUT"
    """sync flush: appended but the fsync did not complete in time (not acknowledged)."""


@dataclass(slots=True)
class PutRequest:
    """A message a producer (or an internal caller) asks the store to append.

    ``delay_level`` > 0 parks the message in SCHEDULE_TOPIC_XXXX (S1); ``queue_id`` None means
    the store picks one (round robin). ``properties`` are the caller's; tags and keys are
    moved into `TAGS`/`KEYS` by the engine. The engine never changes a request; treat it as
    immutable once handed over (not frozen: a frozen dataclass costs ~4x more to build, and
    the HTTP layer builds one per produced message)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    delay_level: int = 0
    flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\0" * 8
    reconsume_times: int = 0
    sys_flag: int = 0
    deliver_at: int | None = None
    """A timer message's delivery time, epoch ms (SPEC T1; instead of ``delay_level``)."""
    delay_ms: int | None = None
    """A timer message's delay from its store time, ms (SPEC T1)."""

    def timer_deliver_at(self, store_timestamp: int) -> int | None:
        """The effective delivery time of a timer message stored at ``store_timestamp`` (a
        time in the past delivers now); None for any other message."""
        if self.deliver_at is not None:
            return max(self.deliver_at, store_timestamp)
        if self.delay_ms is not None:
            return store_timestamp + self.delay_ms
        return None


class PutResult(NamedTuple):
    """Where one message went (a named tuple: the writer builds one per message under its
    lock, and a tuple costs a fraction of a dataclass to build)."""

    status: PutStatus
    msg_id: str
    """The message's unique id (issue 20.4): the same for every copy of it."""
    topic: str
    """Where the message was stored: the schedule topic for delayed messages, the DLQ for an
    R10 reroute, else the topic asked for."""
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    size: int
    offset_msg_id: str
    """Where this copy is stored (store host + CommitLog offset)."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    queue_id: int
    min_offset: int
    max_offset: int
    """One past the last entry (the next queue offset to be written)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    queues: tuple[QueueInfo, ...]
    system: bool


@dataclass(frozen=True, slots=True)
class QueueRead:
    """A pull: the messages from ``queue_offset`` on (tag-filtered), and where to go next."""

    messages: list[CommitLogRecord]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class HandoverResult(HandoverAnswer):
    """The wire answer of a hand-over, plus what the API layer needs and no client sees."""

    delivered_messages: list[tuple[str, str, str | None, int]] = field(
        default_factory=list, metadata=wire_meta(internal=True))
    """(real topic, new msgId, producer's ``traceparent`` or None, lateness ms) of each
    delivered message, in order: the API layer links a ``store.deliver`` span to the
    producer's trace (O1, D10). Plain strings: the engine imports no OpenTelemetry."""


@dataclass(frozen=True, slots=True)
class RangeCopyResult(RangeCopyAnswer):
    """The wire answer of a range copy, plus the appends' results (for the flush check)."""

    results: list[PutResult] = field(default_factory=list, metadata=wire_meta(internal=True))
