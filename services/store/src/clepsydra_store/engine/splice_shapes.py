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
from clepsydra_store.engine.codec import SpliceTemplate, splice_template, value_field

_FIELD = name_field(P.UNIQ_KEY)
_HEAD = len(_FIELD) + VALUE_LEN.size
"""``name_len | name | value_len`` of a UNIQ_KEY property."""
_MAX_SHAPES = 1024

_Shape = tuple[SpliceTemplate, int, int, int]
"""(the template learned, with UNIQ_KEY left out of its values; index of the static piece
holding the UNIQ_KEY field, 0-2; where that field's value length starts in it; the value's
length there)."""
_Key = tuple[int, bytes, bytes]


class SpliceShapes:
    """``splice_template`` of stored blocks, parsed once per shape (writer lock held)."""

    def __init__(self) -> None:
        self._shapes: dict[_Key, _Shape | None] = {}
        """Shapes learned (None: one that did not check out)."""
        self._seen: set[_Key] = set()
        """Shapes met once: a shape is learned at its second block (learning costs two parses,
        and timers falling due one by one rarely meet a shape twice while it is cached)."""

    def template(self, block: bytes) -> tuple[SpliceTemplate, str] | None:
        """(``codec.splice_template(block)``, its ``UNIQ_KEY``); None when the block has no
        non-empty ``UNIQ_KEY`` or the codec cannot splice it. The template's values of a block
        of a known shape hold no ``UNIQ_KEY``: it is the second item."""
        p = block.find(_FIELD)
        if p < 0:
            return None  # no UNIQ_KEY: the rebuild gives the message its msgId
        start = p + _HEAD
        if start > len(block):
            return None
        (length,) = VALUE_LEN.unpack_from(block, p + len(_FIELD))
        end = start + length
        if length == 0 or end > len(block):
            return _whole(block)
        key = (p, block[:p], block[end:])
        shape = self._shapes.get(key)
        if shape is None:
            parsed = _whole(block)
            if parsed is None or key in self._shapes:  # (a shape that did not check out)
                return parsed
            if key in self._seen:  # its second block: worth learning
                self._seen.discard(key)
                if len(self._shapes) >= _MAX_SHAPES:
                    self._shapes.clear()
                self._shapes[key] = _learn(block, p, length, parsed[0])
            else:
                if len(self._seen) >= _MAX_SHAPES:
                    self._seen.clear()
                self._seen.add(key)
            return parsed
        try:
            uniq = block[start:end].decode()
        except UnicodeDecodeError:
            return None  # what the codec answers for an undecodable value
        return _put(shape, block[p + len(_FIELD):end]), uniq


def _whole(block: bytes) -> tuple[SpliceTemplate, str] | None:
    template = splice_template(block)
    if template is None:
        return None
    uniq = template[4].get(P.UNIQ_KEY)
    return (template, uniq) if uniq else None


def _put(shape: _Shape, field: bytes) -> SpliceTemplate:
    """The shape's template with ``field`` (value length and value) in place."""
    template, index, at, length = shape
    t0, first, t1, t2, values = template
    pieces = [t0, t1, t2]
    piece = pieces[index]
    pieces[index] = b"".join((piece[:at], field, piece[at + VALUE_LEN.size + length:]))
    return pieces[0], first, pieces[1], pieces[2], values


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
    if (t0, t1, t2)[index].find(own, at + 1) >= 0:
        return None
    shape = ((t0, first, t1, t2, {k: v for k, v in values.items() if k != P.UNIQ_KEY}),
             index, at, length)
    other = b"0" * (length + 1)
    field = value_field(other)
    expected = splice_template(block[:p] + _FIELD + field + block[p + _HEAD + length:])
    if expected is None or _put(shape, field)[:4] != expected[:4] \
            or {**shape[0][4], P.UNIQ_KEY: other.decode()} != expected[4]:
        return None
    return shape
