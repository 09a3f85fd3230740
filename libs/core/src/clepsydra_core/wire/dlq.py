"""The retry service's DLQ toolkit (SPEC R16), spoken by the retry service and the client SDK:
what a listing, resend or purge selects, and the answers.

- ``GET /v1/groups/{group}/dlq?offset=&max=&topic=&key=&reason=&fromMs=&toMs=`` (the filter as
  query parameters) -> :class:`DlqPage` of :class:`DlqMessage`
- ``GET /v1/groups/{group}/dlq/{msgId}`` -> :class:`DlqMessage` with its histories
- ``POST /v1/groups/{group}/dlq/resend`` :class:`DlqResend` -> :class:`ResendResult`
- ``POST /v1/groups/{group}/dlq/purge`` :class:`DlqPurge` (``DELETE .../dlq`` takes the same
  selection as query parameters) -> :class:`PurgeResult`
- ``GET /v1/groups/{group}/dlq/audit?max=`` -> :class:`DlqAudit` of :class:`AuditRecord`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from clepsydra_core.errors import ValidationError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import ID_PATTERN, check_id
from clepsydra_core.wire.cluster import ShardFailure
from clepsydra_core.wire.codec import WireValue, wire_meta
from clepsydra_core.wire.messages import StoredMessage

FILTER_FIELDS = ("topic", "key", "reason", "fromMs", "toMs")
_MS = wire_meta(minimum=0, rule="R16")
MAX_MSG_IDS = 10_000
"""Most msgIds one resend or purge names (a filter selects more)."""
MAX_PER_SECOND = 1_000_000
"""The highest rate limit a resend takes."""
TARGETS = ("retry", "origin")
"""Where a resend goes: the group's retry topic (the default) or the original topic."""
SELECTORS = ("msgIds", "all", "filter")
"""A resend's or purge's ways of selecting dead letters; exactly one is given."""
_MAX_LEVEL = DelayLevels.default().max_level
_SELECTION: dict[str, Any] = {"oneOf": [
    {"required": ["msgIds"], "properties": {"msgIds": {"type": "array"}}},
    {"required": ["all"], "properties": {"all": {"const": True}}},
    {"required": ["filter"], "properties": {"filter": {"type": "object"}}}]}


def _bad(message: str) -> ValidationError:
    return ValidationError(message, rule="R16", code="INVALID_REQUEST")


@dataclass(frozen=True, slots=True)
class DlqFilter(WireValue):
    """Dead letters whose original topic (RETRY_TOPIC) is ``topic``, whose keys or UNIQ_KEY
    include ``key``, whose DLQ_REASON or failure-history reasons contain ``reason``
    (case-insensitive), and that were dead-lettered in [fromMs, toMs) (an empty window selects
    none). In a resend or purge body at least one field is given."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {"anyOf": [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in FILTER_FIELDS]}

    topic: str | None = None
    key: str | None = None
    reason: str | None = None
    from_ms: int | None = field(default=None, metadata=_MS)
    to_ms: int | None = field(default=None, metadata=_MS)

    def is_empty(self) -> bool:
        return all(v is None for v in (self.topic, self.key, self.reason, self.from_ms,
                                       self.to_ms))

    def wire_check(self, name: str) -> None:
        if self.is_empty():
            raise ValidationError(f"{name} is empty (use all: true to select every dead "
                                  "letter)", rule="R16", code="INVALID_REQUEST")


def _msg_ids_meta(doc: str) -> dict[str, Any]:
    return wire_meta(min_items=1, max_items=MAX_MSG_IDS, doc=doc,
                     schema={"items": {"type": "string", "pattern": ID_PATTERN}})


def _check_selection(name: str, msg_ids: list[str] | None, every: bool | None,
                     flt: DlqFilter | None) -> None:
    """Exactly one of msgIds, all: true and filter; each msgId one the store could know."""
    chosen = [n for n, v in zip(SELECTORS, (msg_ids, every, flt), strict=True)
              if v not in (None, False)]
    if len(chosen) != 1:
        raise _bad(f"{name}: give exactly one of msgIds, all: true, or filter")
    for item in msg_ids or ():
        check_id(item)  # INVALID_MSG_ID names it


@dataclass(frozen=True, slots=True)
class DlqResend(WireValue):
    """Exactly one of msgIds, all: true, filter; where to (target) and how fast."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {"allOf": [_SELECTION, {
        "if": {"required": ["delayLevel"], "properties": {"delayLevel": {"minimum": 1}}},
        "then": {"properties": {"target": {"const": "retry"}}}}]}

    msg_ids: list[str] | None = field(default=None, metadata=_msg_ids_meta(
        "msgIds (or dead-letter offsetMsgIds); one not in the DLQ: 404 NOT_IN_DLQ, nothing "
        "resent"))
    all: bool | None = None
    filter: DlqFilter | None = None
    target: str | None = field(default=None, metadata=wire_meta(
        doc="retry (default): into %RETRY%<group>, so only this group receives the message "
            "again; origin: back to its original topic (RETRY_TOPIC), where every group "
            "subscribed to it receives it",
        schema={"enum": [*TARGETS, None], "default": TARGETS[0]}))
    delay_level: int | None = field(default=None, metadata=wire_meta(
        minimum=0, doc="target retry: the level of the copy in %RETRY%<group> (0: at once); "
                       "at most the service's highest level",
        schema={"maximum": _MAX_LEVEL}))
    max_per_second: float | None = field(default=None, metadata=wire_meta(
        doc="rate limit", schema={"exclusiveMinimum": 0, "maximum": MAX_PER_SECOND}))

    def wire_check(self, name: str) -> None:
        _check_selection(name, self.msg_ids, self.all, self.filter)
        if self.target is not None and self.target not in TARGETS:
            raise _bad(f"{name}.target must be 'retry' (the default) or 'origin', got "
                       f"{self.target!r}")
        if self.delay_level and self.target not in (None, TARGETS[0]):
            raise _bad(f"{name}.delayLevel applies only to target 'retry'")
        rate = self.max_per_second
        if rate is not None and not 0 < rate <= MAX_PER_SECOND:
            raise _bad(f"{name}.maxPerSecond must be a number in (0, {MAX_PER_SECOND}], "
                       f"got {rate!r}")


@dataclass(frozen=True, slots=True)
class DlqPurge(WireValue):
    """Exactly one of msgIds, all: true, filter (the body form of ``DELETE .../dlq``)."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = _SELECTION

    msg_ids: list[str] | None = field(default=None, metadata=_msg_ids_meta(
        "msgIds (or dead-letter offsetMsgIds); one not in the DLQ: 404 NOT_IN_DLQ, nothing "
        "purged"))
    all: bool | None = None
    filter: DlqFilter | None = None

    def wire_check(self, name: str) -> None:
        _check_selection(name, self.msg_ids, self.all, self.filter)


FAILED_DOC = ("store shards the change did not reach, each with why (a shard that did not "
              "answer, or refuses writes while drained); run it again for them")


@dataclass(frozen=True, slots=True)
class ResendResult(WireValue):
    resent: int
    skipped: int = field(metadata=wire_meta(
        doc="all/filter only: messages without a resendable original topic"))
    target: str = field(metadata=wire_meta(schema={"enum": list(TARGETS)}))
    failed: list[ShardFailure] | None = field(default=None, metadata=wire_meta(
        doc=FAILED_DOC))


@dataclass(frozen=True, slots=True)
class PurgeResult(WireValue):
    purged: int
    failed: list[ShardFailure] | None = field(default=None, metadata=wire_meta(
        doc=FAILED_DOC))


@dataclass(frozen=True, slots=True)
class AuditWhat(WireValue):
    """What a resend or purge selected (the first msgIds named and their count, the filter,
    or all) and, for a resend, where to and how fast."""

    msg_ids: list[str] | None = None
    msg_id_count: int | None = None
    filter: DlqFilter | None = None
    all: bool | None = None
    target: str | None = None
    delay_level: int | None = None
    max_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class AuditRecord(WireValue):
    """One resend or purge: when, what, how many, by which client (``X-Client-Id``, else the
    remote address); ``error`` says what stopped a resend part way."""

    time: int
    action: str = field(metadata=wire_meta(schema={"enum": ["resend", "purge"]}))
    what: AuditWhat
    count: int
    client: str
    skipped: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DlqAudit(WireValue):
    """Every resend and purge of the group, oldest first (the newest ``max``)."""

    records: list[AuditRecord]


@dataclass(frozen=True, slots=True)
class ResendEntry(WireValue):
    """One DLQ resend of a message (an entry of its RESEND_HISTORY)."""

    time: int | None = None
    client: str | None = None
    group: str | None = None
    target: str | None = None
    unparsed: str | None = field(default=None, metadata=wire_meta(
        doc="an entry that could not be read, as it is"))


@dataclass(frozen=True, slots=True)
class FailureEntry(WireValue):
    """One failed attempt (an entry of the message's FAILURE_HISTORY)."""

    time: int | None = None
    consumer: str | None = None
    reason: str | None = None
    reconsume_times: int | None = None
    unparsed: str | None = field(default=None, metadata=wire_meta(
        doc="an entry that could not be read, as it is"))


@dataclass(frozen=True, slots=True)
class DlqMessage(StoredMessage):
    """A dead letter: the store's message view (``offsetMsgId`` is this dead-letter copy's
    place) plus its original topic, dead-letter reason, attempts and resends recorded, and,
    shown alone, its failure and resend histories."""

    origin_topic: str | None = None
    dlq_reason: str | None = None
    attempts: int = 0
    resends: int = field(default=0, metadata=wire_meta(
        doc="DLQ resends recorded in RESEND_HISTORY"))
    failure_history: list[FailureEntry] | None = None
    resend_history: list[ResendEntry] | None = field(default=None, metadata=wire_meta(
        doc="RESEND_HISTORY: each DLQ resend of the message, oldest first (shown alone)"))


@dataclass(frozen=True, slots=True)
class DlqPage(WireValue):
    """Dead letters not resent or purged, from ``offset`` on; ``nextOffset`` continues. With
    more than one store shard (DEC-store-shards) a listing walks the shards in turn: each row
    says its ``shard``, ``nextShard`` (with ``nextOffset``) is where the next page starts while
    shards are left, and shards that did not answer are in ``unreachable``."""

    messages: list[DlqMessage]
    next_offset: int
    max_offset: int | None = None
    next_shard: int | None = field(default=None, metadata=wire_meta(
        doc="more than one store shard: the shard the next page starts on (with nextOffset); "
            "absent once the last shard is listed"))
    unreachable: list[int] | None = field(default=None, metadata=wire_meta(
        doc="store shards that did not answer: their dead letters are not in the listing"))
