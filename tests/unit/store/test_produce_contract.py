"""The produce hot path and the wire type agree: ``parse_plain`` (the fast
parser, no validation objects) takes only messages that ``ProduceMessage`` reads, and reads them
to the same PutRequest as the slow path; the answers carry the wire type's names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.produce import ProduceAnswer, ProduceMessage
from clepsydra_core.wire.timers import MAX_DELAY_MS, MAX_DELIVER_AT
from clepsydra_store.api import produce
from clepsydra_store.engine.types import PutResult, PutStatus

HOST = b"\x7f\x00\x00\x01\x00\x00\x1f\x91"
NOW = 1_700_000_000_000
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
_FIELDS = st.sampled_from(["body", "bodyBase64", "tags", "keys", "properties", "queueId",
                           "delayLevel", "flag", "bornTimestamp", "topic", "delayMs",
                           "deliverAt"])
_VALUES = (st.text(max_size=4) | st.none() | st.integers(-2**31 - 1, 2**31)
           | st.sampled_from([True, 1.0, "QQ==", "\ud800", MAX_DELAY_MS, MAX_DELAY_MS + 1,
                              MAX_DELIVER_AT, MAX_DELIVER_AT + 1, 2**63])
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


def test_timers_take_the_fast_parser() -> None:
    """SPEC T1: the SDK's ``send(delay=)`` and ``deliver_at=`` shapes are read by the hot
    path, to the same request as the wire type's."""
    props = {"UNIQ_KEY": "C0000202000000000000000000000001", **TRACE}
    for timer in ({"delayMs": 5000}, {"deliverAt": NOW + 5000}, {"delayMs": 0}):
        msg = {"body": "x", "properties": props, **timer}
        fast = produce.parse_plain(msg, "T", 1024, HOST, NOW, TRACE)
        assert fast is not None, msg
        assert fast == produce.parse_message(msg, "T", 1024, HOST, NOW, TRACE)
        assert (fast.delay_ms, fast.deliver_at) == (timer.get("delayMs"), timer.get("deliverAt"))
    two_ways = {"body": "x", "delayMs": 5, "delayLevel": 0}
    assert produce.parse_plain(two_ways, "T", 1024, HOST, NOW, TRACE) is None


def test_answers_carry_the_wire_names() -> None:
    result = PutResult(PutStatus.OK, "ID", "T", 1, 2, 3, 4, 10, "OFFSET-ID")
    names = tuple(n for n in ProduceAnswer.json_names() if n != "deliverAt")  # timers only
    assert tuple(produce.result_json(result)) == names
    assert ProduceAnswer.from_json(produce.result_json(result)).commitlog_offset == 3
