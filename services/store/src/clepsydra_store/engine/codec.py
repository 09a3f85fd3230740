"""The record codec of the store (issue 13.3): a record ready to place (:class:`Prepared`),
built from a properties dict (:meth:`Prepared.build`) or spliced from stored bytes, on the
layouts ``clepsydra_core.records`` (header, tail, tagsCode, offsetMsgId) and
``clepsydra_core.properties`` (``name_len | name | value_len | value``) export.

The hand-over's D4 edit of a parked message's properties is defined here once, in two forms
that must give the same bytes: :func:`handover_properties` on a dict (``Handover._rebuild``,
the path that also explains a D7 park) and :func:`splice_template` / :func:`splice_properties`
on the stored block (``Handover._splice``, the hot path). tests/unit/store/test_codec.py holds
them equal on random blocks.
"""

from __future__ import annotations

import struct
from typing import NamedTuple
from zlib import crc32

from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.properties import NAME_LEN, VALUE_LEN, encode_properties, name_field
from clepsydra_core.records import (
    HEADER_SIZE,
    MIN_END_MARKER,
    U8,
    encode_record_tail,
    tags_code,
)
from clepsydra_store.engine.dispatch import Mark, record_keys
from clepsydra_store.engine.key_index import key_hash


class Prepared(NamedTuple):
    """A record with everything but its offsets and store timestamp, in the field order the
    writer unpacks (``StoreCore._place``). The produce hot path builds these directly
    (``engine.batch_encoder.BatchEncoder``), the hand-over splices them (``Handover._splice``);
    other callers use :meth:`build`."""

    size: int
    topic: str
    queue_id: int
    tags_code: int
    delay_ms: int
    """> 0 for the schedule topic: tagsCode = store timestamp + delay_ms (S2); < 0 for a timer
    given a deliver time: tagsCode = max(tags_code, store timestamp) (issue 15)."""
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
    """What dispatch does for this record beyond its entry (``dispatch.Mark``): the level's
    schedule queue offset it hands over (D9), a parked timer, a cancel."""
    deliver_ts: int
    uniq_key: str
    """The message's unique id (its ``UNIQ_KEY``, its msgId); "" without one."""

    @classmethod
    def build(cls, topic: str, queue_id: int, body: bytes, props: dict[str, str], *,
              flag: int, sys_flag: int, born_timestamp: int, born_host: bytes,
              reconsume_times: int, delay_ms: int = 0, mark: Mark | None = None,
              deliver_ts: int = 0, max_size: int) -> Prepared:
        tail = encode_record_tail(body, topic.encode(), encode_properties(props))
        size = HEADER_SIZE + len(tail)
        if size + MIN_END_MARKER > max_size:
            raise too_large(size, max_size)
        return cls(size, topic, queue_id, 0 if delay_ms else tags_code(props.get(P.TAGS)),
                   delay_ms, crc32(body), flag, sys_flag, born_timestamp, born_host,
                   reconsume_times, len(body), tail,
                   tuple(key_hash(k) for k in record_keys(props)), mark, deliver_ts,
                   props.get(P.UNIQ_KEY, ""))


def too_large(size: int, max_size: int) -> ValidationError:
    return ValidationError(f"message of {size} bytes does not fit a CommitLog segment of "
                           f"{max_size} bytes", rule="P1", code="BODY_TOO_LARGE")


def topic_field(topic_raw: bytes) -> bytes:
    """``topic_length | topic`` of a record tail."""
    return U8.pack(len(topic_raw)) + topic_raw


# ---- the D4 edit (hand-over) ------------------------------------------------------------------
HANDOVER_DROPPED = (P.DELAY, P.DELIVER_AT, P.DELAY_MS)
"""Properties a parked message loses when it is handed to its real topic (D4, issue 15)."""
HANDOVER_READ = (P.REAL_TOPIC, P.REAL_QID, P.TAGS, P.KEYS, P.UNIQ_KEY, P.TRACEPARENT)
"""Properties whose values the hand-over reads."""


def schedule_offset(level: int, queue_offset: int) -> str:
    """``SCHEDULE_OFFSET`` of the copy handed over from entry ``queue_offset`` of ``level``
    (0: the timer log), SPEC D9."""
    return f"{level}:{queue_offset}"


def handover_properties(props: dict[str, str], level: int, queue_offset: int,
                        deliver_ts: int) -> dict[str, str]:
    """D4 on a properties dict, in place: :data:`HANDOVER_DROPPED` out, ``SCHEDULE_OFFSET``
    then ``DELIVER_TS`` set (in its place when present, else appended)."""
    for name in HANDOVER_DROPPED:
        props.pop(name, None)
    props[P.SCHEDULE_OFFSET] = schedule_offset(level, queue_offset)
    props[P.DELIVER_TS] = str(deliver_ts)
    return props


SpliceTemplate = tuple[bytes, bool, bytes, bytes, dict[str, str]]
"""(t0, SCHEDULE_OFFSET first, t1, t2, values read) of a stored properties block: the block
after D4 is ``t0 | value | t1 | value | t2`` with the SCHEDULE_OFFSET and DELIVER_TS values
(length-prefixed) in that order when "SCHEDULE_OFFSET first", else the other way round."""

_DROPPED_RAW = frozenset(name.encode() for name in HANDOVER_DROPPED)
_READ_RAW = {name.encode(): name for name in HANDOVER_READ}
_OFFSET_RAW = P.SCHEDULE_OFFSET.encode()
_DELIVER_TS_RAW = P.DELIVER_TS.encode()
_EDITED_RAW = _DROPPED_RAW | {_OFFSET_RAW, _DELIVER_TS_RAW}
_OFFSET_FIELD = name_field(P.SCHEDULE_OFFSET)
_DELIVER_TS_FIELD = name_field(P.DELIVER_TS)


def splice_template(block: bytes) -> SpliceTemplate | None:
    """The :data:`SpliceTemplate` of a stored properties block, giving the bytes
    :func:`handover_properties` and ``encode_properties`` give for its dict; None when the
    block has a repeated name or does not decode (the dict path then decides)."""
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
                    pieces += (block[p:q - 4], None)
                    order.append(name == _OFFSET_RAW)
                run = v_end
            p = v_end
    except (struct.error, UnicodeDecodeError):
        return None
    pieces.append(block[run:end])
    if _OFFSET_RAW not in seen:
        pieces += (_OFFSET_FIELD, None)
        order.append(True)
    if _DELIVER_TS_RAW not in seen:
        pieces += (_DELIVER_TS_FIELD, None)
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


def splice_properties(template: SpliceTemplate, level: int, queue_offset: int,
                      deliver_ts: int) -> bytes:
    """The properties block after D4, from its :func:`splice_template`."""
    t0, offset_first, t1, t2, _ = template
    offset = schedule_offset(level, queue_offset).encode()
    deliver = str(deliver_ts).encode()
    first, second = (offset, deliver) if offset_first else (deliver, offset)
    return b"".join((t0, VALUE_LEN.pack(len(first)), first, t1, VALUE_LEN.pack(len(second)),
                     second, t2))
