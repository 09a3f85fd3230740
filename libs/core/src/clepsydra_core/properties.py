"""Names of the reserved message properties, and their binary encoding.

The stored encoding is length-prefixed (``u16 name length | name | u32 value length | value``,
UTF-8), so there are no separator characters and any Unicode text round-trips. Text that cannot
be encoded as UTF-8 (a lone surrogate) is refused by validation (SPEC P1).
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from clepsydra_core.errors import CorruptRecordError

DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
UNIQ_KEY = "UNIQ_KEY"
KEYS = "KEYS"
TAGS = "TAGS"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
RECONSUME_TIME = "RECONSUME_TIME"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DELAY_MS = "DELAY_MS"
"""Exact delay asked for (SPEC T1); reserved for the timer path."""
DELIVER_AT = "DELIVER_AT"
"""Exact delivery time in epoch ms (SPEC T1); reserved for the timer path."""
DELIVER_TS = "DELIVER_TS"
"""Set by the store when a scheduled message is handed to its real topic: its deliver time."""
SCHEDULE_OFFSET = "SCHEDULE_OFFSET"
"""`<level>:<queueOffset>` of the schedule entry a delivered message came from (SPEC D9);
level 0 is the timer log (SPEC T2)."""
CANCEL_OF = "CANCEL_OF"
"""`<level>:<queueOffset>` (level 0: the timer log) of the entry a cancel tombstone takes back
(SPEC T1)."""
SCHEDULE_ERROR = "SCHEDULE_ERROR"
"""Why a scheduled message was parked in `%SCHEDULE_ERROR%` (SPEC D7)."""
TRANSACTION_PREPARED = "TRAN_MSG"
FAILURE_HISTORY = "FAILURE_HISTORY"
"""JSON list of failed attempts ({time, consumer, reason}), carried across retries (R16)."""
DLQ_REASON = "DLQ_REASON"
"""Why a message was dead-lettered: `max_reconsume_times` or `level_negative`."""
RESEND_HISTORY = "RESEND_HISTORY"
"""JSON list of the DLQ resends of a message ({time, client, group, from}), oldest first
(SPEC R16): set by the store's copy when the retry service resends a dead letter."""

SHARDING_KEY = "__SHARDINGKEY"
"""A RocketMQ 5 ``message_group`` (FIFO): RocketMQ's own property name for it, so the gateway
and RocketMQ tools read it alike (DEC-gateway-fifo)."""

RESERVED = frozenset(
    {
        DELAY, REAL_TOPIC, REAL_QID, RETRY_TOPIC, ORIGIN_MESSAGE_ID, UNIQ_KEY, KEYS, TAGS,
        MAX_RECONSUME_TIMES, RECONSUME_TIME, TRACEPARENT, TRACESTATE, DELAY_MS, DELIVER_AT,
        DELIVER_TS, SCHEDULE_OFFSET, SCHEDULE_ERROR, TRANSACTION_PREPARED, FAILURE_HISTORY,
        DLQ_REASON, RESEND_HISTORY, CANCEL_OF,
    }
)

CLIENT_SETTABLE = frozenset(
    {UNIQ_KEY, TRACEPARENT, TRACESTATE, RETRY_TOPIC, ORIGIN_MESSAGE_ID, MAX_RECONSUME_TIMES,
     RECONSUME_TIME, FAILURE_HISTORY}
)
"""Reserved names a producer may still set itself (trace context, and the R9 fallback fields)."""

LIST_MAX_ENTRIES = 32
"""A list-valued property (FAILURE_HISTORY, RESEND_HISTORY) keeps its newest entries only, so
properties stay bounded (P1)."""
UNPARSED_MAX_CHARS = 1024
"""Text of a list-valued property that is not a JSON list is kept as one entry, cut here."""


def append_to_list(raw: str | None, entry: Any, max_entries: int = LIST_MAX_ENTRIES) -> str:
    """The JSON list a list-valued property holds with ``entry`` appended, the newest
    ``max_entries`` kept. Text that is not a JSON list (a client may set the property) is kept
    as one ``{"unparsed": text}`` entry."""
    items: list[Any] = []
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        items = parsed if isinstance(parsed, list) else [{"unparsed": raw[:UNPARSED_MAX_CHARS]}]
    items.append(entry)
    return json.dumps(items[-max_entries:], ensure_ascii=False, separators=(",", ":"))


def trace_id_of(props: Mapping[str, str]) -> str | None:
    """The 32-hex trace id in a message's ``traceparent`` (SPEC O1), or None."""
    parts = props.get(TRACEPARENT, "").split("-")
    return parts[1] if len(parts) >= 4 else None


NAME_LEN = struct.Struct(">H")
"""A property name's length prefix (the stored properties layout: name_len | name | value_len |
value, repeated)."""
VALUE_LEN = struct.Struct(">I")
"""A property value's length prefix."""


_NAME_PREFIX_CACHE: dict[str, bytes] = {}
_NAME_PREFIX_CACHE_MAX = 4096


def name_field(name: str) -> bytes:
    """``name_len | name`` of one stored property: the bytes every property of that name starts
    with (writers that splice properties hold these; UnicodeEncodeError on invalid text)."""
    raw = name.encode()
    return NAME_LEN.pack(len(raw)) + raw


def property_field(name: str, value: str) -> bytes:
    """One stored property, ``name_len | name | value_len | value``."""
    raw = value.encode()
    return name_field(name) + VALUE_LEN.pack(len(raw)) + raw


def encode_properties(props: dict[str, str]) -> bytes:
    """Encode properties; raises UnicodeEncodeError on text that is not valid Unicode."""
    if not props:
        return b""
    out: list[bytes] = []
    append = out.append
    cache = _NAME_PREFIX_CACHE
    for name, value in props.items():
        prefix = cache.get(name)
        if prefix is None:
            prefix = name_field(name)
            if len(cache) < _NAME_PREFIX_CACHE_MAX:
                cache[name] = prefix
        v = value.encode()
        append(prefix)
        append(VALUE_LEN.pack(len(v)))
        append(v)
    return b"".join(out)


_NAME_CACHE: dict[bytes, str] = {}
"""Property names as decoded (:func:`decode_properties`): a store sees few."""


def decode_properties(raw: bytes | memoryview, start: int = 0, end: int | None = None
                      ) -> dict[str, str]:
    """Inverse of :func:`encode_properties` for ``raw[start:end]`` (all of it by default);
    CorruptRecordError on bytes that do not parse. Every pulled record decodes its properties:
    a block that matches the layout held for its length is cut by it in a few C calls
    (DEC-props-layout); any other is read property by property, one bound check a property,
    the names kept decoded (DEC-pull-json-view), and now and then offered as a layout."""
    if not isinstance(raw, bytes):
        raw = bytes(raw)
    if end is None:
        end = len(raw)
    size = end - start
    sampled = False
    if size >= _LAYOUT_MIN_BYTES:
        layout = _layout_of(size)
        if layout is None:
            sampled = next(_SAMPLE)
        elif start >= 0 and end <= len(raw):
            block = raw[start:end]
            if layout.skeleton_of(block) != layout.skeleton:
                layout.miss(size)
            elif block.isascii():
                layout.score += 1
                # zip stops at the names, before the getter's empty slice (strict= is slower)
                values = layout.values_of(block.decode("ascii"))
                return dict(zip(layout.names, values))  # noqa: B905
            else:
                try:
                    values = map(bytes.decode, layout.values_of(block))
                    props = dict(zip(layout.names, values))  # noqa: B905
                except UnicodeDecodeError:
                    pass  # the loop raises it as it always has
                else:
                    layout.score += 1
                    return props
    props = {}
    pos = start
    names = _NAME_CACHE
    name_len, value_len = NAME_LEN.unpack_from, VALUE_LEN.unpack_from
    try:
        while pos < end:
            name_at = pos + 2
            name_end = name_at + name_len(raw, pos)[0]
            value_at = name_end + 4
            pos = value_at + value_len(raw, name_end)[0]
            if pos > end:  # the name or the value runs past the block
                raise CorruptRecordError("a property runs past the properties block")
            name_raw = raw[name_at:name_end]
            name = names.get(name_raw)
            if name is None:
                name = name_raw.decode()
                if len(names) < _NAME_PREFIX_CACHE_MAX:
                    names[name_raw] = name
            props[name] = raw[value_at:pos].decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"properties do not decode: {exc}") from exc
    if sampled:
        _sighted(size, raw[start:end], props)
    return props


class _Layout:
    """Where the properties of every block of one shape lie (DEC-props-layout): the
    ``name_len | name | value_len`` fields (the block's skeleton) and the values between them,
    each as one ``itemgetter`` of slices. A block of the layout's length whose skeleton equals
    :attr:`skeleton` reads, property by property, exactly as these names with the values at
    these places: the skeleton holds every length the reading follows. Each getter carries one
    empty slice more, so it answers a tuple for one property too (``zip`` stops at the
    names)."""

    __slots__ = ("names", "score", "size", "skeleton", "skeleton_of", "values_of")

    def __init__(self, props: dict[str, str]) -> None:
        skeleton, fields, values, pos = [], [], [], 0
        for name, value in props.items():
            value_len = len(value.encode())
            field = name_field(name) + VALUE_LEN.pack(value_len)  # as encode_properties writes
            value_at = pos + len(field)
            skeleton.append(field)
            fields.append(slice(pos, value_at))
            values.append(slice(value_at, value_at + value_len))
            pos = value_at + value_len
        skeleton.append(b"")
        self.skeleton_of = itemgetter(*fields, _EMPTY)
        self.values_of = itemgetter(*values, _EMPTY)
        self.skeleton = tuple(skeleton)
        self.names = tuple(props)
        self.score = 0
        self.size = pos

    def miss(self, size: int) -> None:
        """A block of this length that is not of this shape: halve the credit the hits earned
        and take two. A layout that misses about twice as often as it hits costs more than it
        saves: it is dropped, and its length rests (:data:`_LAYOUT_REST`)."""
        self.score = (self.score >> 1) - 2
        if self.score < -3 and _LAYOUTS.pop(size, None) is self:
            _SIGHTED[size] = -_LAYOUT_REST


def _sighted(size: int, block: bytes, props: dict[str, str]) -> None:
    """Count a sampled block of a length without a layout, read by the loop into ``props``:
    the second sampled sighting of a length that is not resting builds its layout from the
    block (DEC-props-layout)."""
    if size > _LAYOUT_MAX_BYTES or len(props) > _LAYOUT_MAX_FIELDS:
        return  # a layout's memory stays small (DEC-props-layout)
    seen = _SIGHTED.get(size, 0)
    if seen < 1:
        if len(_SIGHTED) >= _LAYOUTS_MAX:
            _SIGHTED.clear()
        _SIGHTED[size] = seen + 1
        return
    layout = _Layout(props)
    if layout.size != size or layout.skeleton_of(block) != layout.skeleton:
        # Not these properties in this order: a block that repeats a name (its dict holds
        # fewer fields than it has), or one that runs past the end of ``raw``.
        _SIGHTED[size] = -_LAYOUT_REST
        return
    _SIGHTED.pop(size, None)
    if len(_LAYOUTS) >= _LAYOUTS_HELD:
        _LAYOUTS.clear()
    _LAYOUTS[size] = layout


_EMPTY = slice(0, 0)
_LAYOUTS: dict[int, _Layout] = {}
"""The layout held for a properties block's length."""
_layout_of = _LAYOUTS.get
_SIGHTED: dict[int, int] = {}
"""Sampled sightings of a length without a layout (negative: resting after a dropped one)."""
_SAMPLE_EVERY = 64
_SAMPLE = itertools.cycle([False] * (_SAMPLE_EVERY - 1) + [True])
"""Which of the blocks read by the loop are sampled: one in :data:`_SAMPLE_EVERY` (``next`` on
it is one step under the interpreter lock; threads sharing it only move the samples)."""
_LAYOUT_REST = 8
"""Sampled sightings a dropped layout's length waits before it may build another."""
_LAYOUTS_MAX = 1024
"""Lengths counted at most (:data:`_SIGHTED`); a full map is emptied."""
_LAYOUTS_HELD = 256
"""Layouts held at most; a full map is emptied."""
_LAYOUT_MIN_BYTES = 64
"""Blocks shorter than this are always read by the loop: a layout does not pay for them."""
_LAYOUT_MAX_BYTES = 4096
_LAYOUT_MAX_FIELDS = 64
"""Blocks longer, or of more properties, get no layout: one layout holds about twice its block's
bytes and two slices a property (30 KB at these bounds), all of them under 8 MB."""
