"""Values the engine takes and returns: its own types, never the HTTP layer's (``api/`` builds
the wire answers from these). A base module: every layer of the engine may import it, and it
imports none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, NamedTuple, Protocol, TypeVar

from clepsydra_core.records import CommitLogRecord, decode_record

TIMER_LEVEL = 0
"""The "level" of the timer log: in a ``SCHEDULE_OFFSET`` or ``CANCEL_OF`` value, a mark, the
level of a timer's hand-over."""


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


class PutResult(NamedTuple):
    """Where one message went (a named tuple: the writer builds one per message under its
    lock, and a tuple costs a fraction of a dataclass to build)."""

    status: PutStatus
    msg_id: str
    """The message's unique id: the same for every copy of it."""
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
    deliver_at: int | None = None
    """A delayed message's deliver time as stored (S2; T1: a time in the past is its store
    time); None for any other."""


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


Item = TypeVar("Item")
"""What a read gives for each record: the record itself, or a view built from its bytes."""


class RecordReader(Protocol[Item]):
    """How a read decodes the records it reads (:meth:`CommitLog.read_records`,
    ``MessageStore.read_queue``): :data:`RECORDS` gives each one as a
    :class:`CommitLogRecord`; a pull's answer gives its JSON view straight from the bytes read,
    without the record between (DEC-pull-json-view)."""

    def decode(self, raw: bytes, pos: int) -> tuple[Item, int]:
        """(the item, the record's total size) at ``pos``; CorruptRecordError as
        ``decode_record``."""
        ...

    def of(self, record: CommitLogRecord) -> Item:
        """The item of a record read on its own."""
        ...

    def offset(self, item: Item) -> int:
        """The CommitLog offset of the record it was decoded from."""
        ...

    def tags(self, item: Item) -> str | None:
        """The record's tags (C3's filter by string)."""
        ...


class _Records:
    """Records as :class:`CommitLogRecord` (every read but a pull's answer)."""

    @staticmethod
    def decode(raw: bytes, pos: int) -> tuple[CommitLogRecord, int]:
        return decode_record(raw, pos)

    @staticmethod
    def of(record: CommitLogRecord) -> CommitLogRecord:
        return record

    @staticmethod
    def offset(item: CommitLogRecord) -> int:
        return item.commitlog_offset

    @staticmethod
    def tags(item: CommitLogRecord) -> str | None:
        return item.tags


RECORDS: RecordReader[CommitLogRecord] = _Records()


@dataclass(frozen=True, slots=True)
class QueueRead(Generic[Item]):
    """A pull: the messages from ``queue_offset`` on (tag-filtered), and where to go next."""

    messages: list[Item]
    next_offset: int
    min_offset: int
    max_offset: int


Delivered = tuple[str, str, str | None, int]
"""(real topic, new msgId, producer's ``traceparent`` or None, lateness ms) of a message a
hand-over delivered: the API layer links a ``store.deliver`` span to the producer's trace (O1,
D10). Plain strings: the engine imports no OpenTelemetry."""


@dataclass(frozen=True, slots=True)
class LevelEntries:
    """Deliver times (raw tagsCode) of a level's schedule entries from ``queue_offset`` on,
    with the queue's bounds and the level's handed-over mark (D3, D8, D9)."""

    level: int
    queue_offset: int
    deliver_ts: list[int]
    min_offset: int
    max_offset: int
    handed_over: int


@dataclass(frozen=True, slots=True)
class HandoverResult:
    """What a level's hand-over did (D4, D5, D7, D9, D10)."""

    level: int
    from_offset: int
    """Where it really started: the entry after the level's handed-over mark."""
    next_offset: int
    delivered: int
    parked: int
    skipped: int
    """Positions from the asked offset that were handed over before (D9)."""
    not_due: bool
    """Stopped at an entry not due yet (D5); ``next_deliver_ts`` is its time."""
    next_deliver_ts: int | None
    lateness_ms: list[int]
    handed_over: int
    delivered_messages: list[Delivered] = field(default_factory=list)


@dataclass(slots=True)
class TimerHandoverResult:
    """What a timers' hand-over did (T1, T2, D10)."""

    delivered: int = 0
    parked: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    next_due_at: int | None = None
    delivered_messages: list[Delivered] = field(default_factory=list)


class Fate(StrEnum):
    """What a cancel or a reschedule did to a pending delayed message (T2)."""

    CANCELLED = "cancelled"
    RESCHEDULED = "rescheduled"


class ParkedState(StrEnum):
    """Where a parked copy of a message stands (a message's history)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    """Handed over to its real topic."""
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a cancel or reschedule did: ``status``, the messages it acted on, and the new
    delivery time of a reschedule."""

    status: Fate
    msg_ids: list[str]
    deliver_at: int | None = None


@dataclass(frozen=True, slots=True)
class HourCount:
    hour: int
    """Hours ahead of now (0: due within the hour, or overdue)."""
    count: int


@dataclass(frozen=True, slots=True)
class Lateness:
    """Nearest-rank percentiles of recent timers' lateness, ms (D10)."""

    p50: int
    p99: int
    max: int


@dataclass(frozen=True, slots=True)
class TimerBacklog:
    """The pending timers by hour ahead, the next due time and recent lateness (T1)."""

    pending: int
    by_hour_ahead: list[HourCount]
    handed_over: int
    next_due_at: int | None
    lateness: Lateness | None


@dataclass(frozen=True, slots=True)
class CopyRequest:
    """Copy the message stored at ``commitlog_offset`` into ``topic`` (R3-R8, R16): body, flag,
    properties, bornTimestamp, bornHost and sysFlag kept, the changes applied;
    ``delay_level`` > 0 parks the copy (S1). ``append_properties``: name -> an entry (JSON text,
    or text) appended to the JSON list that property holds."""

    commitlog_offset: int
    topic: str
    queue_id: int | None = None
    delay_level: int = 0
    reconsume_times: int | None = None
    set_properties: dict[str, str] = field(default_factory=dict)
    remove_properties: tuple[str, ...] = ()
    append_properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RangeCopyRequest:
    """Copy queue offsets ``[from_offset, from_offset + max_count)`` of ``topic``/``queue_id``
    to ``target_topic`` (None: each message back to its ``RETRY_TOPIC``, R16), each as a
    :class:`CopyRequest` would, with one write."""

    topic: str
    queue_id: int
    from_offset: int
    target_topic: str | None
    max_count: int
    delay_level: int = 0
    reconsume_times: int | None = None
    remove_properties: tuple[str, ...] = ()
    append_properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SkippedCopy:
    queue_offset: int
    msg_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class RangeCopyResult:
    copied: int
    copied_msg_ids: list[str]
    """offsetMsgIds of the source copies copied, in queue order."""
    skipped: list[SkippedCopy]
    next_offset: int
    last_commitlog_offset: int | None
    results: list[PutResult] = field(default_factory=list)
    """The appends' results (for the flush check)."""
