"""The hand-over's splice templates parsed once per shape of properties block (issue 14).

Every parked message has its own ``UNIQ_KEY``, so no two stored properties blocks are equal
and a cache of ``codec.splice_template`` by block never hits: the template was parsed again
for every message handed over (a quarter of a drain's CPU). Blocks that differ only in the
``UNIQ_KEY`` value have the same *shape*, and their templates differ only there (``UNIQ_KEY``
is never edited by D4, so its field lies whole in one static piece of the template). A shape
is learned from its second block by the codec itself and checked; then each block of that
shape gets its template by putting its own value in place, which is exactly what
``codec.splice_template`` gives for it (``tests/unit/store/test_drain.py`` holds them equal
on random blocks).

A block's shape is ``(p, block[:p], block[after the UNIQ_KEY value:])`` where ``p`` is the
first occurrence of the ``UNIQ_KEY`` name field. A shape is learned only when ``p`` is a real
field boundary of the block it is learned from; a block of the same shape has the same bytes
before ``p``, so the same fields end there, and the same bytes after its value: the same block
but for that value. Anything else (no ``UNIQ_KEY``, an empty one, a shape that does not check
out) is parsed whole by the codec, as before.
"""

from __future__ import annotations

import struct

from clepsydra_core import properties as P
from clepsydra_core.properties import NAME_LEN, VALUE_LEN, name_field
from clepsydra_store.engine.codec import (
    SpliceTemplate,
    splice_properties,
    splice_template,
    value_field,
)

_FIELD = name_field(P.UNIQ_KEY)
_HEAD = len(_FIELD) + VALUE_LEN.size
"""``name_len | name | value_len`` of a UNIQ_KEY property."""
_MAX_SHAPES = 1024

_Shape = tuple[SpliceTemplate, int, bytes]
"""(the template learned, UNIQ_KEY left out of its values and its static piece holding the
UNIQ_KEY field cut just before that field's value length; where that piece lands among
``codec.splice_properties``'s fields, 0, 2 or 4; what follows the value in that piece)."""
Fields = tuple[list[bytes], dict[str, str], str]
"""(``codec.splice_properties`` of a block: the fields of its properties block after D4, for
``codec.encode_tail``; the values the hand-over reads, ``codec.HANDOVER_READ``; its
``UNIQ_KEY``)."""
_Key = tuple[int, bytes, bytes]


class SpliceShapes:
    """``splice_template`` of stored blocks, parsed once per shape (writer lock held)."""

    def __init__(self) -> None:
        self._shapes: dict[_Key, _Shape | None] = {}
        """Shapes learned (None: one that did not check out)."""
        self._seen: set[_Key] = set()
        """Shapes met once: a shape is learned at its second block (learning costs two parses,
        and timers falling due one by one rarely meet a shape twice while it is cached)."""

    def fields(self, block: bytes, level: int, queue_offset: int, deliver_ts: int
               ) -> Fields | None:
        """The D4 fields of ``block`` handed over from entry ``queue_offset`` of ``level``
        delivered at ``deliver_ts``: ``codec.splice_properties(codec.splice_template(block),
        ...)`` (issue 14: for a block of a known shape, the learned template's pieces with the
        block's own ``UNIQ_KEY`` value field between them, no template built per block and no
        piece joined, ``codec.encode_tail`` joins them once); with the values read and the
        ``UNIQ_KEY``. None when the block has no non-empty ``UNIQ_KEY`` or the codec cannot
        splice it. The values of a block of a known shape hold no ``UNIQ_KEY``: it is the
        third item."""
        p = block.find(_FIELD)
        if p < 0:
            return None  # no UNIQ_KEY: the rebuild gives the message its msgId
        start = p + _HEAD
        if start > len(block):
            return None
        (length,) = VALUE_LEN.unpack_from(block, p + len(_FIELD))
        end = start + length
        if length == 0 or end > len(block):
            return _whole(splice_template(block), level, queue_offset, deliver_ts)
        key = (p, block[:p], block[end:])
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
                self._shapes[key] = _learn(block, p, length, template)
            else:
                if len(self._seen) >= _MAX_SHAPES:
                    self._seen.clear()
                self._seen.add(key)
            return parsed
        try:
            uniq = block[start:end].decode()
        except UnicodeDecodeError:
            return None  # what the codec answers for an undecodable value
        template = shape[0]
        return (_put(shape, block[p + len(_FIELD):end], level, queue_offset, deliver_ts),
                template[4], uniq)


def _whole(template: SpliceTemplate | None, level: int, queue_offset: int, deliver_ts: int
           ) -> Fields | None:
    """The fields of a block parsed whole by the codec (its ``splice_template``)."""
    if template is None:
        return None
    values = template[4]
    uniq = values.get(P.UNIQ_KEY)
    if not uniq:
        return None
    return splice_properties(template, level, queue_offset, deliver_ts), values, uniq


def _put(shape: _Shape, field: bytes, level: int, queue_offset: int, deliver_ts: int
         ) -> list[bytes]:
    """The D4 fields of the shape's block holding ``field`` (value length and value of its
    UNIQ_KEY): the template's fields with ``field`` and what follows it put in after the cut
    piece."""
    template, at, after = shape
    fields = splice_properties(template, level, queue_offset, deliver_ts)
    fields[at + 1:at + 1] = (field, after)
    return fields


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


def _learn(block: bytes, p: int, length: int, template: SpliceTemplate) -> _Shape | None:
    """The shape of ``block`` (its UNIQ_KEY field at ``p``, its value ``length`` bytes long),
    or None when it does not check out: ``p`` not a field boundary, the field not found
    whole exactly once in the template's static pieces, or another value of another length,
    put in its place, not giving what the codec gives for the block holding it."""
    if not _boundary(block, p):
        return None
    t0, first, t1, t2, values = template
    own = block[p + len(_FIELD):p + _HEAD + length]
    places = [(index, piece.find(own)) for index, piece in enumerate((t0, t1, t2))
              if own in piece]
    if len(places) != 1:
        return None
    index, at = places[0]
    pieces = [t0, t1, t2]
    if pieces[index].find(own, at + 1) >= 0:
        return None
    piece = pieces[index]
    pieces[index] = piece[:at]
    shape = ((pieces[0], first, pieces[1], pieces[2],
              {k: v for k, v in values.items() if k != P.UNIQ_KEY}),
             2 * index, piece[at + len(own):])
    other = b"0" * (length + 1)
    field = value_field(other)
    expected = splice_template(block[:p] + _FIELD + field + block[p + _HEAD + length:])
    probe = (1, 2, 3)  # any level, entry and deliver time: the edited fields are the codec's
    if expected is None or b"".join(_put(shape, field, *probe)) != b"".join(
            splice_properties(expected, *probe)) \
            or {**shape[0][4], P.UNIQ_KEY: other.decode()} != expected[4]:
        return None
    return shape
