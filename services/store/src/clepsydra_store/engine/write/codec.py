"""The record codec of the store: the one encoder of record tails and property blocks, and
the one maker of a record ready to place (:class:`Prepared`, :func:`prepare`), on the layouts
``clepsydra_core.records`` (header, tail, tagsCode, offsetMsgId) and
``clepsydra_core.properties`` (``name_len | name | value_len | value``) export.

Every record the store writes is encoded here: :func:`property_field` writes one property,
:func:`encode_tail` frames a record's tail around its properties block and :func:`prepare`
makes the record of a tail (the size check of P1 included), for the produce encoder
(``write/encoder.py``), the dict form :meth:`Prepared.build` (copies, tombstones, the D7 park,
timers), the hand-over's splice (``schedule/drain.py``) and the carry-forward's
:func:`relocated_header`. The header is packed by ``records.pack_header`` alone, in the writer.

The hand-over's D4 edit of a parked message's properties is defined here once, on the stored
block: :func:`splice_template` reads a block once, :func:`splice_properties` gives the edited
block for an entry (``schedule/splice_shapes.py`` keeps the templates of blocks of one shape),
and :func:`handed_over_fields` puts a properties dict through the same edit (the rebuild of a
record the splice cannot take as it is). tests/unit/store/test_codec.py holds the edit to
SPEC D4's reference on random blocks, and the records of every writer to a reference encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple
from zlib import crc32

from clepsydra_core import properties as P
from clepsydra_core.errors import BodyTooLarge
from clepsydra_core.properties import NAME_LEN, VALUE_LEN, name_field
from clepsydra_core.records import (
    HEADER_SIZE,
    I32,
    MIN_END_MARKER,
    RECORD_HEADER,
    U8,
    pack_header,
    tags_code,
)
from clepsydra_store.engine.index.key_index import key_hash, record_keys
from clepsydra_store.engine.index.marks import Mark, schedule_offset


# ---- the encoder ------------------------------------------------------------------------------
def property_field(name: bytes, raw: bytes, _value_len: Callable[[int], bytes] = VALUE_LEN.pack
                   ) -> bytes:
    """One stored property, ``name_len | name | value_len | value``: ``name`` is the property's
    ``properties.name_field`` (``name_len | name``, which writers hold), ``raw`` its UTF-8
    value."""
    return name + _value_len(len(raw)) + raw


def value_field(raw: bytes) -> bytes:
    """A property's value as stored after its name, ``value_len | value`` (what
    :func:`property_field` appends to the name)."""
    return property_field(b"", raw)


def encode_tail(body: bytes | memoryview, topic: bytes, fields: list[bytes]) -> bytes:
    """A record's tail, everything after its header (``records.pack_header``): ``body |
    topic_length | topic | properties_length | properties``. ``topic`` is the record's
    :func:`topic_field`; its properties block is ``fields`` in order, each a
    :func:`property_field` or a run of them (a block encoded before, cached). The record is
    ``HEADER_SIZE + len(tail)`` bytes."""
    block = b"".join(fields)
    return b"".join((body, topic, I32.pack(len(block)), block))


def topic_field(topic_raw: bytes) -> bytes:
    """``topic_length | topic`` of a record tail."""
    return U8.pack(len(topic_raw)) + topic_raw


TOPIC_FIELDS: dict[str, bytes] = {}
"""topic -> its :func:`topic_field` (writers look here first: ``TOPIC_FIELDS.get(topic) or
topic_field_of(topic)``)."""
_TOPIC_FIELDS_MAX = 1024


def topic_field_of(topic: str) -> bytes:
    """The :func:`topic_field` of a topic name, kept in :data:`TOPIC_FIELDS`."""
    field = topic_field(topic.encode())
    if len(TOPIC_FIELDS) >= _TOPIC_FIELDS_MAX:
        TOPIC_FIELDS.clear()
    TOPIC_FIELDS[topic] = field
    return field


_NAMES: dict[str, bytes] = {}
"""Property names encoded by :func:`properties_fields` -> their ``name_field``."""
_NAMES_MAX = 4096


def properties_fields(props: dict[str, str]) -> list[bytes]:
    """The :func:`property_field` of each property of a dict, in its order (the properties
    block of :func:`encode_tail`); UnicodeEncodeError on text that is not valid Unicode."""
    get, field = _NAMES.get, property_field
    return [field(get(name) or _name_field(name), value.encode())
            for name, value in props.items()]


def _name_field(name: str) -> bytes:
    """``properties.name_field`` of a property name, cached."""
    field = name_field(name)
    if len(_NAMES) < _NAMES_MAX:
        _NAMES[name] = field
    return field


def relocated_header(raw: bytes, commitlog_offset: int) -> bytes:
    """The header of the stored record ``raw`` when the same record is written again at
    ``commitlog_offset`` (carry-forward, P4): every field kept but its own CommitLog offset."""
    (size, _magic, crc, queue_id, flag, queue_offset, _old, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, body_len) = RECORD_HEADER.unpack_from(raw, 0)
    return pack_header(size, crc, queue_id, flag, queue_offset, commitlog_offset, sys_flag,
                       born_ts, born_host, store_ts, store_host, reconsume, body_len)


def record_too_large(size: int, segment_size_bytes: int) -> BodyTooLarge:
    """P1: a record that cannot fit a CommitLog segment (its end marker's room kept)."""
    return BodyTooLarge(f"message of {size} bytes does not fit a CommitLog segment of "
                        f"{segment_size_bytes} bytes", rule="P1")


class Prepared(NamedTuple):
    """A record with everything but its offsets and store timestamp, in the field order the
    writer unpacks (``write/writer.py``). Made by :func:`prepare` alone."""

    size: int
    topic: str
    queue_id: int
    tags_code: int
    delay_ms: int
    """How the entry's code is completed at the store time (``marks.entry_code``): 0, the
    code as it is; > 0, a schedule entry's deliver time, store time + delay_ms (S2); < 0, a
    timer's deliver time, ``tags_code`` but never before the store time (T1)."""
    crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    reconsume_times: int
    body_len: int
    tail: bytes
    key_hashes: tuple[int, ...]
    """key_index.key_hash of each KEYS key and of UNIQ_KEY."""
    mark: Mark | None
    """What dispatch does for this record beyond its entry (``index/marks.py``): the level's
    schedule queue offset it hands over (D9), a parked timer, a cancel."""
    deliver_ts: int
    uniq_key: str
    """The message's unique id (its ``UNIQ_KEY``, its msgId); "" without one."""

    @classmethod
    def build(cls, topic: str, queue_id: int, body: bytes, props: dict[str, str], *,
              flag: int, sys_flag: int, born_timestamp: int, born_host: bytes,
              reconsume_times: int, code: int | None = None, delay_ms: int = 0,
              mark: Mark | None = None, deliver_ts: int = 0, max_size: int) -> Prepared:
        """The record of a properties dict (the produce encoder's records are byte-equal to
        these); ``code`` None: the hash of its tags (S2)."""
        return prepare(body, topic, queue_id, TOPIC_FIELDS.get(topic) or topic_field_of(topic),
                       properties_fields(props),
                       tags_code(props.get(P.TAGS)) if code is None else code, delay_ms,
                       crc32(body), flag, sys_flag, born_timestamp, born_host, reconsume_times,
                       tuple(map(key_hash, record_keys(props))), mark, deliver_ts,
                       props.get(P.UNIQ_KEY, ""), max_size)


def prepare(body: bytes | memoryview, topic: str, queue_id: int, topic_raw: bytes,
            fields: list[bytes], code: int, delay_ms: int, crc: int, flag: int, sys_flag: int,
            born_timestamp: int, born_host: bytes, reconsume_times: int,
            key_hashes: tuple[int, ...], mark: Mark | None, deliver_ts: int, uniq_key: str,
            max_size: int, _new: Callable[..., Prepared] = tuple.__new__) -> Prepared:
    """The :class:`Prepared` record of ``body`` stored in ``topic`` (``topic_raw``: its
    :func:`topic_field`) with the properties block ``fields`` (:func:`encode_tail`); P1
    (``record_too_large``) when it would not fit a segment of ``max_size`` bytes with its
    end marker. Positional: the produce encoder and the hand-over's splice make one per
    message."""
    tail = encode_tail(body, topic_raw, fields)
    size = HEADER_SIZE + len(tail)
    if size + MIN_END_MARKER > max_size:
        raise record_too_large(size, max_size)
    return _new(Prepared, (size, topic, queue_id, code, delay_ms, crc, flag, sys_flag,
                           born_timestamp, born_host, reconsume_times, len(body), tail,
                           key_hashes, mark, deliver_ts, uniq_key))


# ---- the D4 edit (hand-over) ------------------------------------------------------------------
HANDOVER_DROPPED = (P.DELAY, P.DELIVER_AT, P.DELAY_MS)
"""Properties a parked message loses when it is handed to its real topic (D4, T1)."""
HANDOVER_READ = (P.REAL_TOPIC, P.REAL_QID, P.TAGS, P.KEYS, P.UNIQ_KEY, P.TRACEPARENT)
"""Properties whose values the hand-over reads."""


SpliceTemplate = tuple[bytes, bool, bytes, bytes, dict[str, str]]
"""(t0, SCHEDULE_OFFSET first, t1, t2, values read) of a stored properties block: the block
after D4 is ``t0 | field | t1 | field | t2`` with the SCHEDULE_OFFSET and DELIVER_TS
properties (:func:`property_field`) in that order when "SCHEDULE_OFFSET first", else the other
way round."""

_DROPPED_RAW = frozenset(name.encode() for name in HANDOVER_DROPPED)
_READ_RAW = {name.encode(): name for name in HANDOVER_READ}
_OFFSET_RAW = P.SCHEDULE_OFFSET.encode()
_DELIVER_TS_RAW = P.DELIVER_TS.encode()
_EDITED_RAW = _DROPPED_RAW | {_OFFSET_RAW, _DELIVER_TS_RAW}
_OFFSET_FIELD = name_field(P.SCHEDULE_OFFSET)
_DELIVER_TS_FIELD = name_field(P.DELIVER_TS)


def splice_template(block: bytes) -> SpliceTemplate | None:
    """The :data:`SpliceTemplate` of a stored properties block: D4 on it is
    :data:`HANDOVER_DROPPED` out, ``SCHEDULE_OFFSET`` then ``DELIVER_TS`` set (each in its
    place when present, else appended), as on the block's dict; None when the block has a
    repeated name or does not decode (the rebuild then reads the record as a dict,
    :func:`handed_over_fields`)."""
    pieces: list[bytes | None] = []
    """Static bytes, and None where a value goes."""
    order: list[bool] = []
    seen: set[bytes] = set()
    values: dict[str, str] = {}
    run = p = 0
    end = len(block)
    try:
        while p < end:
            (nlen,) = NAME_LEN.unpack_from(block, p)
            q = p + 2 + nlen
            name = block[p + 2:q]
            (vlen,) = VALUE_LEN.unpack_from(block, q)
            q += 4
            v_end = q + vlen
            if v_end > end or q > end or name in seen:
                return None
            seen.add(name)
            value = block[q:v_end]
            name.decode()
            read = _READ_RAW.get(name)
            if read is not None:
                values[read] = value.decode()
            else:
                value.decode()
            if name in _EDITED_RAW:
                pieces.append(block[run:p])
                if name not in _DROPPED_RAW:
                    pieces.append(None)
                    order.append(name == _OFFSET_RAW)
                run = v_end
            p = v_end
    except (struct.error, UnicodeDecodeError):
        return None
    pieces.append(block[run:end])
    if _OFFSET_RAW not in seen:
        pieces.append(None)
        order.append(True)
    if _DELIVER_TS_RAW not in seen:
        pieces.append(None)
        order.append(False)
    static: list[bytes] = []
    current: list[bytes] = []
    for piece in pieces:
        if piece is None:
            static.append(b"".join(current))
            current = []
        else:
            current.append(piece)
    static.append(b"".join(current))
    return static[0], order[0], static[1], static[2], values


_last_deliver: tuple[int, bytes] = (-1, b"")
"""The last ``DELIVER_TS`` field :func:`handover_fields` encoded, with its deliver time: a
drain's entries come in runs of one deliver time (a producer's batch is stored in one
millisecond), DEC-drain-splice-shapes."""


def handover_fields(level: int, queue_offset: int, deliver_ts: int) -> tuple[bytes, bytes]:
    """The ``SCHEDULE_OFFSET`` and ``DELIVER_TS`` fields (:func:`property_field`) D4 gives the
    copy of entry ``queue_offset`` of ``level`` delivered at ``deliver_ts``."""
    global _last_deliver
    offset = property_field(_OFFSET_FIELD, schedule_offset(level, queue_offset).encode())
    last_ts, deliver = _last_deliver
    if last_ts != deliver_ts:
        deliver = property_field(_DELIVER_TS_FIELD, str(deliver_ts).encode())
        _last_deliver = (deliver_ts, deliver)
    return offset, deliver


def splice_properties(template: SpliceTemplate, level: int, queue_offset: int,
                      deliver_ts: int) -> list[bytes]:
    """The properties block after D4 (the fields of :func:`encode_tail`), from its
    :func:`splice_template`."""
    t0, offset_first, t1, t2, _ = template
    offset, deliver = handover_fields(level, queue_offset, deliver_ts)
    if offset_first:
        return [t0, offset, t1, deliver, t2]
    return [t0, deliver, t1, offset, t2]


def handed_over_fields(props: dict[str, str], level: int, queue_offset: int, deliver_ts: int,
                       schedule_error: str | None = None) -> list[bytes]:
    """D4 on a properties dict (a record the splice cannot take as it is: it lacks its
    ``UNIQ_KEY``, or its block does not decode): the block of the dict through the same edit,
    :func:`splice_properties`; with ``schedule_error``, a D7 park's reason set after it
    (``SCHEDULE_ERROR`` in its place when present, else last)."""
    if schedule_error is not None and P.SCHEDULE_ERROR in props:
        props = {**props, P.SCHEDULE_ERROR: schedule_error}  # D4 leaves it where it is
        schedule_error = None
    template = splice_template(b"".join(properties_fields(props)))
    assert template is not None  # a dict's block: every name once, every value text
    fields = splice_properties(template, level, queue_offset, deliver_ts)
    if schedule_error is not None:
        fields.append(property_field(_SCHEDULE_ERROR_FIELD, schedule_error.encode()))
    return fields


_SCHEDULE_ERROR_FIELD = name_field(P.SCHEDULE_ERROR)
