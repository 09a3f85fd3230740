"""The store's internal copy routes (docs/contracts.md), spoken by the store and the retry
service: send-back (R3-R8), dead-lettering (R6) and DLQ resend (R16) copy stored messages into
other topics without the body crossing the wire.

- ``POST /v1/internal/copy`` :class:`CopyBatch` -> ``{results: [<produce result>]}``
- ``POST /v1/internal/copy-range`` :class:`RangeCopy` -> :class:`RangeCopyAnswer`
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import INT32_MAX, WireValue, wire_meta
from clepsydra_core.wire.topics import topic_meta

MAX_COPY_BATCH = 1000
"""Most items one copy call takes, and most messages one range copy moves."""
ORIGIN = "origin"
"""A range copy's ``target`` that sends each message back to its ``RETRY_TOPIC``."""


@dataclass(frozen=True, slots=True)
class CopyItem(WireValue):
    """Copy the message stored at ``commitlog_offset`` into ``topic``: body, flag,
    properties, bornTimestamp, bornHost and sysFlag kept, tags hash recomputed, the changes
    applied; ``delay_level`` > 0 parks the copy in the schedule topic (S1).
    ``append_properties``: property name -> one JSON value appended to the JSON list that
    property holds (started when absent, newest ``properties.LIST_MAX_ENTRIES`` kept), e.g. a
    DLQ resend recorded in ``RESEND_HISTORY``."""

    commitlog_offset: int = field(metadata=wire_meta(json="commitLogOffset", minimum=0))
    topic: str = field(metadata=topic_meta())
    queue_id: int | None = field(default=None,
                                 metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    delay_level: int = field(default=0, metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    reconsume_times: int | None = field(default=None,
                                        metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    set_properties: dict[str, str] = field(default_factory=dict, metadata=wire_meta(
        schema={"propertyNames": {"minLength": 1}}))
    remove_properties: tuple[str, ...] = ()
    append_properties: dict[str, str] = field(default_factory=dict, metadata=wire_meta(
        schema={"propertyNames": {"minLength": 1}},
        doc="property name -> an entry appended to the JSON list it holds: the JSON value the "
            "text holds, or the text itself"))


@dataclass(frozen=True, slots=True)
class CopyBatch(WireValue):
    """Every item is checked before any is written; the copies are appended together."""

    items: list[CopyItem] = field(metadata=wire_meta(min_items=1, max_items=MAX_COPY_BATCH))


@dataclass(frozen=True, slots=True)
class RangeCopy(WireValue):
    """Copy queue offsets ``[from_offset, from_offset + max_count)`` of ``topic``/``queue_id``
    to ``target`` (a topic, or :data:`ORIGIN`) with one write: like a :class:`CopyItem` per
    message, nothing of it shipped to the caller (the DLQ "resend all" of R16)."""

    topic: str = field(metadata=topic_meta())
    queue_id: int = field(metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    from_offset: int = field(metadata=wire_meta(minimum=0))
    target: str = field(metadata=topic_meta(f"a topic, or {ORIGIN!r}: each message back to its "
                                            "RETRY_TOPIC"))
    max_count: int = field(default=MAX_COPY_BATCH,
                           metadata=wire_meta(json="max", minimum=1, maximum=MAX_COPY_BATCH))
    delay_level: int = field(default=0, metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    reconsume_times: int | None = field(default=None,
                                        metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    remove_properties: tuple[str, ...] = ()
    append_properties: dict[str, str] = field(default_factory=dict, metadata=wire_meta(
        schema={"propertyNames": {"minLength": 1}},
        doc="as CopyItem.appendProperties: the same entries appended to every message copied"))

    @property
    def target_topic(self) -> str | None:
        """The topic every message goes to; None: each back to its original topic (a message
        without ``RETRY_TOPIC``, or whose original topic is a system topic or is gone, is
        skipped with the reason)."""
        return None if self.target == ORIGIN else self.target


@dataclass(frozen=True, slots=True)
class SkippedCopy(WireValue):
    queue_offset: int
    msg_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class RangeCopyAnswer(WireValue):
    copied: int
    copied_msg_ids: list[str]
    """offsetMsgIds of the source copies copied, in queue order (each names one stored
    record; the msgId is the same for every copy of a message)."""
    skipped: list[SkippedCopy]
    """Each source message left where it is, and why."""
    next_offset: int
    last_commitlog_offset: int | None = field(metadata=wire_meta(json="lastCommitLogOffset"))
    """CommitLog offset of the last source message read (copied or skipped)."""
