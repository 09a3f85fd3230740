"""The produce hot path and the wire type agree: ``parse_plain`` (the fast
parser, no validation objects) takes only messages that ``ProduceMessage`` reads, and reads them
to the same PutRequest as the slow path; the answers carry the wire type's names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.produce import ProduceAnswer, ProduceMessage
from clepsydra_store.api import produce
from clepsydra_store.engine.types import PutResult, PutStatus

HOST = b"\x7f\x00\x00\x01\x00\x00\x1f\x91"
NOW = 1_700_000_000_000
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
_FIELDS = st.sampled_from(["body", "bodyBase64", "tags", "keys", "properties", "queueId",
                           "delayLevel", "flag", "bornTimestamp", "topic", "delayMs"])
_VALUES = (st.text(max_size=4) | st.none() | st.integers(-2**31 - 1, 2**31)
           | st.sampled_from([True, 1.0, "QQ==", "\ud800"])
           | st.lists(st.sampled_from(["k", "a b", ""]), max_size=2)
           | st.dictionaries(st.sampled_from(["p", "KEYS", "UNIQ_KEY", ""]),
                             st.sampled_from(["v", 1]), max_size=2))


def test_the_fast_parser_takes_only_wire_fields() -> None:
    assert frozenset(ProduceMessage.json_names()) > produce.PLAIN_FIELDS


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(_FIELDS, _VALUES, max_size=5))
def test_fast_and_slow_parsers_read_alike(msg: dict[str, object]) -> None:
    fast = produce.parse_plain(msg, "T", 1024, HOST, NOW, TRACE)
    try:
        slow = produce.parse_message(msg, "T", 1024, HOST, NOW, TRACE)
    except ValidationError:
        slow = None
    if fast is not None:
        assert slow == fast, msg


def test_answers_carry_the_wire_names() -> None:
    result = PutResult(PutStatus.OK, "ID", "T", 1, 2, 3, 4, 10, "OFFSET-ID")
    names = tuple(n for n in ProduceAnswer.json_names() if n != "deliverAt")  # timers only
    assert tuple(produce.result_json(result)) == names
    assert ProduceAnswer.from_json(produce.result_json(result)).commitlog_offset == 3
