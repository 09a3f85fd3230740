"""The hand-over's splice templates parsed once per shape of properties block
(DEC-drain-splice-shapes).

Every parked message has its own ``UNIQ_KEY``, a message sent through the SDK its own
``TRACEPARENT`` (the producer's span) and a timer its own ``DELIVER_AT``, so no two stored
properties blocks are equal and a cache of ``codec.splice_template`` by block never hits: the
template was parsed again for every message handed over (a quarter of a drain's CPU). Blocks
that differ only in the values of those properties (the *holes*) have the same *shape*, and
their templates differ only there (D4 edits neither ``UNIQ_KEY`` nor ``TRACEPARENT``, so each
of their fields lies whole in one static piece of the template; it drops ``DELIVER_AT``, whose
field is then in none). A shape is learned from its second block by the codec itself and
checked; then each block of that shape gets its D4 fields from the shape's pieces with its own
kept hole values put in place, which is exactly what ``codec.splice_properties`` over
``codec.splice_template`` gives for it (``tests/unit/store/test_drain.py`` holds them equal on
random blocks).

A block's shape is the positions of its holes' name fields (the first occurrence of each;
``UNIQ_KEY`` required, ``TRACEPARENT`` and ``DELIVER_AT`` optional) and its bytes around the
holes' values (each ``value_len | value``). A shape is learned only when those positions are
real field boundaries of the block it is learned from; a block of the same shape has the same
bytes before and between its holes, so the same fields end there, and the same bytes after
them: the same block but for the holes' values. Anything else (no ``UNIQ_KEY``, an empty one,
holes that overlap, a shape that does not check out) is parsed whole by the codec, as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from clepsydra_core import properties as P
from clepsydra_core.properties import NAME_LEN, VALUE_LEN, name_field
from clepsydra_store.engine.write.codec import (
    HANDOVER_READ,
    SpliceTemplate,
    handover_fields,
    splice_properties,
    splice_template,
    value_field,
)

_UNIQ = name_field(P.UNIQ_KEY)
_TRACE = name_field(P.TRACEPARENT)
_DELIVER_AT = name_field(P.DELIVER_AT)
_HOLE_NAMES = (P.UNIQ_KEY, P.TRACEPARENT, P.DELIVER_AT)
"""The holes, by mark."""
_UNIQ_MARK, _TRACE_MARK, _DELIVER_AT_MARK = 0, 1, 2
_MAX_SHAPES = 1024
_OFFSET, _DELIVER = -1, -2
"""Places of the D4 fields in a shape's pieces (the holes kept are 0: UNIQ_KEY,
1: TRACEPARENT; DELIVER_AT, D4 drops)."""

_Hole = tuple[int, int, int]
"""(where the property's name field starts, where its ``value_len`` starts, where its value
ends) in a block."""
_Shape = tuple[list[bytes], int, int, int, int, dict[str, str]]
"""(the fields of ``codec.splice_properties`` for the shape, with b"" in the places of the D4
fields and of the holes' ``value_len | value``; the place of SCHEDULE_OFFSET, of DELIVER_TS,
of the UNIQ_KEY value, of the TRACEPARENT value (-1: none); the values the hand-over reads but
the holes')."""
Fields = tuple[list[bytes], dict[str, str], str, str | None]
"""(``codec.splice_properties`` of a block: the fields of its properties block after D4, for
``codec.encode_tail``; the values the hand-over reads, ``codec.HANDOVER_READ``, but for the
holes of a block of a known shape; its ``UNIQ_KEY``; its ``TRACEPARENT`` or None)."""


def _hole(block: bytes, name: bytes,
          _value_len: Callable[[bytes, int], tuple[int]] = VALUE_LEN.unpack_from
          ) -> _Hole | None:
    """The first ``name`` field of ``block``, if its value lies in the block."""
    p = block.find(name)
    if p < 0:
        return None
    start = p + len(name)
    try:
        end = start + VALUE_LEN.size + _value_len(block, start)[0]
    except struct.error:  # (its value_len past the block's end)
        return None
    return (p, start, end) if end <= len(block) else None


class SpliceShapes:
    """``splice_template`` of stored blocks, parsed once per shape (writer lock held)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[object, ...], _Shape | None] = {}
        """Shapes learned (None: one that did not check out)."""
        self._seen: set[tuple[object, ...]] = set()
        """Shapes met once: a shape is learned at its second block (learning costs two parses,
        and timers falling due one by one rarely meet a shape twice while it is cached)."""

    def fields(self, block: bytes, level: int, queue_offset: int, deliver_ts: int
               ) -> Fields | None:
        """The D4 fields of ``block`` handed over from entry ``queue_offset`` of ``level``
        delivered at ``deliver_ts``: ``codec.splice_properties(codec.splice_template(block),
        ...)`` (for a block of a known shape, the learned pieces with the block's
        own hole values put in, no template built per block), with the values read, the
        ``UNIQ_KEY`` and the ``TRACEPARENT``. None when the block has no non-empty
        ``UNIQ_KEY`` or the codec cannot splice it."""
        uniq = _hole(block, _UNIQ)
        if uniq is None:
            return None  # no UNIQ_KEY: the rebuild gives the message its msgId
        if uniq[2] - uniq[1] == VALUE_LEN.size:  # empty: the codec decides
            return _whole(splice_template(block), level, queue_offset, deliver_ts)
        trace = _hole(block, _TRACE)
        deliver_at = _hole(block, _DELIVER_AT)
        key = _shape_key(block, uniq, trace, deliver_at)
        if key is None:  # one inside another's value
            return _whole(splice_template(block), level, queue_offset, deliver_ts)
        shape = self._shapes.get(key)
        if shape is None:
            template = splice_template(block)
            parsed = _whole(template, level, queue_offset, deliver_ts)
            if template is None or parsed is None or key in self._shapes:
                return parsed  # (in _shapes: a shape that did not check out)
            if key in self._seen:  # its second block: worth learning
                self._seen.discard(key)
                if len(self._shapes) >= _MAX_SHAPES:
                    self._shapes.clear()
                self._shapes[key] = _learn(block, uniq, trace, deliver_at, template)
            else:
                if len(self._seen) >= _MAX_SHAPES:
                    self._seen.clear()
                self._seen.add(key)
            return parsed
        try:
            uniq_value = block[uniq[1] + VALUE_LEN.size:uniq[2]].decode()
            trace_value = None if trace is None else \
                block[trace[1] + VALUE_LEN.size:trace[2]].decode()
            if deliver_at is not None:  # dropped by D4, but the codec decodes every value
                block[deliver_at[1] + VALUE_LEN.size:deliver_at[2]].decode()
        except UnicodeDecodeError:
            return None  # what the codec answers for an undecodable value
        pieces, at_offset, at_deliver, at_uniq, at_trace, values = shape
        fields = pieces.copy()
        fields[at_offset], fields[at_deliver] = handover_fields(level, queue_offset, deliver_ts)
        fields[at_uniq] = block[uniq[1]:uniq[2]]
        if trace is not None:
            fields[at_trace] = block[trace[1]:trace[2]]
        return fields, values, uniq_value, trace_value


def _shape_key(block: bytes, uniq: _Hole, trace: _Hole | None, deliver_at: _Hole | None
               ) -> tuple[object, ...] | None:
    """The shape of ``block`` with its holes: where each hole starts (-1: none) and the bytes
    around their ``value_len | value``; None when one lies inside another's value."""
    if trace is None:
        if deliver_at is None:
            return uniq[0], -1, -1, block[:uniq[1]], block[uniq[2]:]
        other, at = deliver_at, (uniq[0], -1, deliver_at[0])
    elif deliver_at is None:
        other, at = trace, (uniq[0], trace[0], -1)
    else:  # all three
        key: list[object] = [uniq[0], trace[0], deliver_at[0]]
        run = 0
        for p, start, end in sorted((uniq, trace, deliver_at)):  # by where they start
            if p < run:
                return None
            key.append(block[run:start])
            run = end
        key.append(block[run:])
        return tuple(key)
    # two holes (a timer's UNIQ_KEY and DELIVER_AT, an SDK message's UNIQ_KEY and TRACEPARENT)
    first, second = (uniq, other) if uniq[0] < other[0] else (other, uniq)
    if first[2] > second[0]:
        return None
    return (*at, block[:first[1]], block[first[2]:second[1]], block[second[2]:])


def _whole(template: SpliceTemplate | None, level: int, queue_offset: int, deliver_ts: int
           ) -> Fields | None:
    """The fields of a block parsed whole by the codec (its ``splice_template``)."""
    if template is None:
        return None
    values = template[4]
    uniq = values.get(P.UNIQ_KEY)
    if not uniq:
        return None
    return (splice_properties(template, level, queue_offset, deliver_ts), values, uniq,
            values.get(P.TRACEPARENT))


def _boundary(block: bytes, p: int) -> bool:
    """A field of ``block`` starts at byte ``p``."""
    q = 0
    try:
        while q < p:
            (name_len,) = NAME_LEN.unpack_from(block, q)
            q += NAME_LEN.size + name_len
            (value_len,) = VALUE_LEN.unpack_from(block, q)
            q += VALUE_LEN.size + value_len
    except struct.error:
        return False
    return q == p


def _cut(pieces: list[bytes | int], own: bytes, mark: int) -> bool:
    """Put ``mark`` in the place of ``own`` in the static pieces; False unless ``own`` is
    found in them exactly once."""
    found = [(index, piece.find(own)) for index, piece in enumerate(pieces)
             if isinstance(piece, bytes) and own in piece]
    if len(found) != 1:
        return False
    index, at = found[0]
    piece = pieces[index]
    assert isinstance(piece, bytes)
    if piece.find(own, at + 1) >= 0:
        return False
    pieces[index:index + 1] = [piece[:at], mark, piece[at + len(own):]]
    return True


def _learn(block: bytes, uniq: _Hole, trace: _Hole | None, deliver_at: _Hole | None,
           template: SpliceTemplate) -> _Shape | None:
    """The shape of ``block`` (its holes, apart), or None when it does not
    check out: a hole's name field not at a field boundary, a kept hole's value not found
    whole exactly once in the template's static pieces, or other values of other lengths, put
    in their places, not giving what the codec gives for the block holding them."""
    holes = sorted(((mark, hole) for mark, hole in enumerate((uniq, trace, deliver_at))
                    if hole is not None), key=lambda marked: marked[1])
    if not all(_boundary(block, hole[0]) for _, hole in holes):
        return None
    t0, offset_first, t1, t2, values = template
    pieces: list[bytes | int] = [t0, _OFFSET if offset_first else _DELIVER, t1,
                                 _DELIVER if offset_first else _OFFSET, t2]
    for mark, (_, start, end) in holes:
        if mark != _DELIVER_AT_MARK and not _cut(pieces, block[start:end], mark):
            return None  # (DELIVER_AT: D4 drops its field, it is in no piece)
    at = {piece: i for i, piece in enumerate(pieces) if isinstance(piece, int)}
    shape: _Shape = ([b"" if isinstance(piece, int) else piece for piece in pieces],
                     at[_OFFSET], at[_DELIVER], at[_UNIQ_MARK], at.get(_TRACE_MARK, -1),
                     {k: v for k, v in values.items() if k not in _HOLE_NAMES})
    # the check: other values, one byte longer, put in the holes of a copy of the block
    probe = bytearray(block)
    others: dict[str, str] = {}
    for mark, (_, start, end) in reversed(holes):
        name = _HOLE_NAMES[mark]
        other = str(mark) * (end - start - VALUE_LEN.size + 1)
        if name in HANDOVER_READ:
            others[name] = other
        probe[start:end] = value_field(other.encode())
    expected = splice_template(bytes(probe))
    if expected is None:
        return None
    probed = bytes(probe)
    probe_uniq, probe_trace = _hole(probed, _UNIQ), _hole(probed, _TRACE)
    marks = {mark for mark, _ in holes}
    if probe_uniq is None or (_TRACE_MARK in marks) != (probe_trace is not None) \
            or (_DELIVER_AT_MARK in marks) != (_hole(probed, _DELIVER_AT) is not None):
        return None
    fields = shape[0].copy()
    probe_at = (1, 2, 3)  # any level, entry and deliver time: the edited fields are the codec's
    fields[shape[1]], fields[shape[2]] = handover_fields(*probe_at)
    fields[shape[3]] = probed[probe_uniq[1]:probe_uniq[2]]
    if probe_trace is not None:
        fields[shape[4]] = probed[probe_trace[1]:probe_trace[2]]
    if b"".join(fields) != b"".join(splice_properties(expected, *probe_at)) \
            or {**shape[5], **others} != expected[4]:
        return None
    return shape
