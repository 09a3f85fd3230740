"""The properties decoder's layouts (DEC-props-layout): a block of a length with a layout is cut
by it instead of read property by property, and nothing about the result may tell: the same
dict, the same key order, the same CorruptRecordError cases as the plain reading
(``old_decode_properties``, the decoder before layouts) for every block, whatever layouts the
blocks seen before left behind. SPEC P1: any Unicode text round-trips; SPEC P3: a torn or
corrupt record is refused, never read as something else."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core import properties as P
from clepsydra_core.errors import CorruptRecordError
from tests.unit.core.test_record_view import old_decode_properties


@pytest.fixture(autouse=True)
def every_block_sampled() -> Iterator[None]:
    """Every block read by the loop is sampled (a layout after two sightings of a length, not
    128), and no layout is left from another test."""
    saved = P._SAMPLE
    P._SAMPLE = itertools.repeat(True)
    P._LAYOUTS.clear()
    P._SIGHTED.clear()
    yield
    P._SAMPLE = saved
    P._LAYOUTS.clear()
    P._SIGHTED.clear()


def decoded_or_error(raw: bytes, start: int = 0, end: int | None = None,
                     old: bool = False) -> object:
    try:
        if old:
            props = old_decode_properties(raw[start:end])
        else:
            props = P.decode_properties(raw, start, end)
    except CorruptRecordError:
        return CorruptRecordError
    return list(props.items())  # the same keys in the same order, with the same values


def same_as_before(raw: bytes, times: int = 3) -> None:
    """Read ``times`` times (the layout of its length built on the way), each equal to the
    reference, inside a longer buffer too."""
    expected = decoded_or_error(raw, old=True)
    for _ in range(times):
        assert decoded_or_error(raw) == expected
        assert decoded_or_error(b"ab" + raw + b"\0\0\0", 2, 2 + len(raw)) == expected


def burst(i: int) -> dict[str, str]:
    return {P.UNIQ_KEY: f"7F0000010001{i:020X}", P.TAGS: "t", P.DELIVER_AT: "1764351234000",
            P.REAL_TOPIC: "burst", P.REAL_QID: "1", P.SCHEDULE_OFFSET: f"0:{i:05d}",
            P.DELIVER_TS: "1764351234000"}


def test_blocks_of_one_shape_are_cut_by_their_layout() -> None:
    raws = [P.encode_properties(burst(i)) for i in range(50)]
    assert len({len(raw) for raw in raws}) == 1
    for i, raw in enumerate(raws):
        props = P.decode_properties(raw)
        assert props == burst(i) and list(props) == list(burst(i))
    layout = P._LAYOUTS[len(raws[0])]  # built, and every later block hit it
    assert layout.names == tuple(burst(0)) and layout.score == len(raws) - 2


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_LONG = st.text(st.characters(exclude_categories=("Cs",)), min_size=60, max_size=300)
_NAMES = st.sampled_from([P.TAGS, P.KEYS, P.UNIQ_KEY, P.DELIVER_TS, "名前", ""]) | _TEXT
_PROPS = st.dictionaries(_NAMES, _TEXT | _LONG | st.sampled_from(["", "x", "é", "1764351234000"]),
                         max_size=9)


@st.composite
def varied_with_its_shape(draw: st.DrawFn, props: dict[str, str]) -> dict[str, str]:
    """Another block of the same names and value lengths (in code points), or of the same
    block length with other value lengths: what a cached layout must tell apart."""
    out = {}
    for name, value in props.items():
        out[name] = draw(st.text(st.characters(exclude_categories=("Cs",)),
                                 min_size=len(value), max_size=len(value)) | _TEXT)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPS, min_size=1, max_size=6), st.data())
def test_any_blocks_in_any_order_decode_as_the_plain_loop(shapes: list[dict[str, str]],
                                                          data: st.DataObject) -> None:
    """SPEC P1: repeated shapes and varied ones interleaved, so that layouts are built, hit,
    missed and dropped; every read equals the reference's."""
    blocks = []
    for props in shapes:
        blocks += [props] * data.draw(st.integers(1, 4))
        blocks += data.draw(st.lists(varied_with_its_shape(props), max_size=3))
    order = data.draw(st.permutations(blocks))
    for props in order:
        raw = P.encode_properties(props)
        assert P.decode_properties(raw) == props
        same_as_before(raw, times=2)


def test_a_block_of_a_held_length_with_other_names_or_lengths_is_read_as_itself() -> None:
    """A wrong cache hit would answer the layout's names or cut the values at its places."""
    first = {"AAAA": "0123456789" * 7, "B": "xyz"}
    same_length = [
        {"ZZZZ": "0123456789" * 7, "B": "xyz"},  # other name, same lengths
        {"AAAA": "0123456789" * 7 + "xy", "B": "z"},  # other value lengths
        {"AAA": "0123456789" * 7 + "x", "B": "xyz"},  # other name length
        {"B": "xyz", "AAAA": "0123456789" * 7},  # the same fields in another order
        {"AAAA": "0123456789" * 7, "B": "éz"},  # non-ASCII value, same byte length
    ]
    raw = P.encode_properties(first)
    same_as_before(raw)
    assert len(raw) in P._LAYOUTS
    for props in same_length:
        other = P.encode_properties(props)
        assert len(other) == len(raw)
        decoded = P.decode_properties(other)
        assert decoded == props and list(decoded) == list(props)
        assert P.decode_properties(raw) == first  # and the held layout still answers


def test_a_repeated_name_keeps_its_first_place_and_last_value() -> None:
    """A block can hold a name twice (not written by the store, but readable): it has no
    layout (its dict holds fewer fields than it has), and reads as before every time."""
    field = P.property_field
    raw = field("KEY", "1" * 40) + field("OTHER", "x" * 30) + field("KEY", "2" * 40)
    for _ in range(4):
        assert list(P.decode_properties(raw).items()) == [("KEY", "2" * 40), ("OTHER", "x" * 30)]
    assert len(raw) not in P._LAYOUTS


def corruptions(raw: bytes) -> Iterator[bytes]:
    """Blocks of the same length as ``raw`` that do not decode, or decode otherwise."""
    for at in range(len(raw)):
        for bad in (0x00, 0xFF, 0x80, raw[at] ^ 0x01):
            if bad != raw[at]:
                yield raw[:at] + bytes([bad]) + raw[at + 1:]


def test_corrupt_blocks_of_a_held_length_fail_as_before() -> None:
    """SPEC P3: every one-byte change of a block whose length has a layout (a length past the
    end, a name or value no longer UTF-8, another split) reads exactly as the loop reads it:
    the same error or the same dict, with the layout held when it is read."""
    props = {P.UNIQ_KEY: "7F000001000100000000000000012ABC", P.TAGS: "tag", "名前": "値" * 10}
    raw = P.encode_properties(props)
    same_as_before(raw)
    layout = P._LAYOUTS[len(raw)]
    for bad in corruptions(raw):
        expected = decoded_or_error(bad, old=True)
        P._LAYOUTS[len(raw)], layout.score = layout, 0
        assert decoded_or_error(bad) == expected, bad
        P._LAYOUTS[len(raw)], layout.score = layout, 0
        assert decoded_or_error(b"#" + bad + b"#", 1, 1 + len(bad)) == expected, bad
    assert P.decode_properties(raw) == props


def test_truncated_blocks_fail_as_before() -> None:
    """A block cut short, also when what follows it in the buffer would complete it: the same
    error as before, or the same dict where the cut falls between two properties."""
    props = {"NAME": "v" * 80, "OTHER": "w" * 10}
    raw = P.encode_properties(props)
    same_as_before(raw)
    assert len(raw) in P._LAYOUTS
    for cut in range(len(raw)):
        torn = raw[:cut]
        expected = decoded_or_error(torn, old=True)
        assert decoded_or_error(torn) == expected
        assert decoded_or_error(torn + raw[cut:] + b"\0" * 8, 0, cut) == expected


def test_an_end_past_the_bytes_reads_as_before() -> None:
    """No reader passes an ``end`` past its bytes; the plain reading then took a short last
    value, and a held layout of that length does not change it."""
    props = {"NAME": "v" * 80, "OTHER": "w" * 10}
    raw = P.encode_properties(props)
    same_as_before(raw)
    assert len(raw) in P._LAYOUTS
    assert P.decode_properties(raw[:-3], 0, len(raw)) == {"NAME": "v" * 80, "OTHER": "w" * 7}
    with pytest.raises(CorruptRecordError):  # a negative start, as before
        P.decode_properties(raw[3:] + raw, -3, len(raw) - 3)


def test_a_long_block_or_one_of_many_properties_gets_no_layout() -> None:
    """A layout's memory stays small (DEC-props-layout): a block over 4,096 bytes or of more
    than 64 properties is always read by the loop, and reads as before."""
    long = {"BIG": "x" * 5000, P.TAGS: "t"}
    many = {f"p{i}": str(i) for i in range(65)}
    for props in (long, many):
        raw = P.encode_properties(props)
        same_as_before(raw, times=4)
        assert P.decode_properties(raw) == props
        assert len(raw) not in P._LAYOUTS
    fewer = {f"p{i}": str(i) for i in range(64)}
    raw = P.encode_properties(fewer)
    same_as_before(raw)
    assert P._LAYOUTS[len(raw)].names == tuple(fewer)
