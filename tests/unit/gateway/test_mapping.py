"""The gateway's pure mapping of RocketMQ 5's protocol onto Clepsydra (clepsydra_gateway.mapping):
handles, placement, wire views, back-off, error statuses, credentials."""

from __future__ import annotations

import hashlib
import zlib

import pytest

from clepsydra_core import properties as P
from clepsydra_core.errors import (
    AlreadyDelivered,
    BodyTooLarge,
    Forbidden,
    MessageNotFound,
    TopicNotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from clepsydra_core.levels import DelayLevels
from clepsydra_core.runtime.http import error_from_response
from clepsydra_gateway.consume import _one_per_group
from clepsydra_gateway.mapping import (
    GatewayError,
    RecallHandle,
    ReceiptHandle,
    Status,
    access_key,
    backoff_s,
    check_digest,
    crc32_hex,
    delivery_attempt,
    max_attempts,
    queue_of_group,
    status_of,
    user_properties,
    wire_topic,
)
from clepsydra_gateway.protocol import Code
from clepsydra_gateway.state import Delivery


def test_status_codes_are_the_protocols() -> None:
    for status in Status:
        assert Code.Value(status.name) == status.value, status


def test_receipt_handle_round_trips_and_garbage_is_an_invalid_handle() -> None:
    handle = ReceiptHandle("billing", "%RETRY%billing", 3, 1234, "ab12")
    text = handle.encode()
    assert text.startswith("cg1.") and ReceiptHandle.decode(text) == handle
    assert handle.member == "billing/%RETRY%billing/3/1234"
    for bad in ("", "cg1.", "cg2." + text[4:], "cg1.@@@", "cg1.WzEsMiwzXQ", "x" * 5000,
                ReceiptHandle("g", "t", 0, 0, "n").encode()[:-3]):
        with pytest.raises(GatewayError) as caught:
            ReceiptHandle.decode(bad)
        assert caught.value.status is Status.INVALID_RECEIPT_HANDLE


def test_recall_handle_round_trips() -> None:
    handle = RecallHandle("orders", "0102ABC")
    assert RecallHandle.decode(handle.encode()) == handle
    with pytest.raises(GatewayError) as caught:
        RecallHandle.decode("cg1." + handle.encode()[4:])
    assert caught.value.status is Status.BAD_REQUEST


def test_a_message_group_goes_where_the_official_client_hashes_it() -> None:
    # the client's QueueSelector.select_queue_by_hash_key: SHA-256, big-endian, modulo
    for group in ("order-1", "order-2", "ü", ""):
        expected = int.from_bytes(hashlib.sha256(group.encode()).digest(), "big") % 7
        assert queue_of_group(group, 7) == expected
    assert {queue_of_group(f"g{i}", 4) for i in range(100)} == {0, 1, 2, 3}


def test_body_digest_checks() -> None:
    assert crc32_hex(b"abc") == format(zlib.crc32(b"abc"), "08X")
    check_digest(0, "", b"anything")  # no digest given: nothing to check
    check_digest(1, crc32_hex(b"abc").lower(), b"abc")
    check_digest(2, hashlib.md5(b"abc").hexdigest(), b"abc")
    with pytest.raises(GatewayError) as caught:
        check_digest(3, hashlib.sha1(b"abd").hexdigest(), b"abc")
    assert caught.value.status is Status.MESSAGE_CORRUPTED
    with pytest.raises(GatewayError):
        check_digest(9, "x", b"abc")


def test_wire_view_of_a_retry_copy_and_its_properties() -> None:
    # SPEC R4, R15: a %RETRY% copy shows its origin topic
    props = {P.RETRY_TOPIC: "orders", P.UNIQ_KEY: "id", P.SHARDING_KEY: "g", "mine": "1",
             P.TRACEPARENT: "00-1-2-01"}
    assert wire_topic("%RETRY%billing", props) == "orders"
    assert wire_topic("orders", {P.RETRY_TOPIC: "other"}) == "orders"
    assert user_properties(props) == {"mine": "1"}
    assert delivery_attempt(0) == 1 and delivery_attempt(3) == 4  # R8


def test_backoff_is_the_retry_ladder_of_the_level_table() -> None:
    # SPEC R7: level 3 + reconsumeTimes, clamped to the table; whole seconds, at least 1
    levels = DelayLevels.parse("1s 5s 10s 30s 1m 2m")
    assert backoff_s(levels, 16)[:5] == [10, 30, 60, 120, 120]
    assert backoff_s(DelayLevels.parse("1s 1s 1s"), 0) == [1]  # at least one step
    assert len(backoff_s(levels, 2**31 - 1)) == 64  # the client reuses the last step
    assert max_attempts(16) == 17 and max_attempts(2**31 - 1) == 2**31 - 1  # R5


@pytest.mark.parametrize(("error", "status"), [
    (TopicNotFound("t"), Status.TOPIC_NOT_FOUND),
    (MessageNotFound("m"), Status.NOT_FOUND),
    (AlreadyDelivered("m"), Status.NOT_FOUND),
    (Unauthorized("u"), Status.UNAUTHORIZED),
    (Forbidden("f"), Status.FORBIDDEN),
    (ValidationError("big", code="BODY_TOO_LARGE"), Status.MESSAGE_BODY_TOO_LARGE),
    (BodyTooLarge("big", rule="P1"), Status.MESSAGE_BODY_TOO_LARGE),
    # the store's 413 as the one HTTP client reads it (DEC-too-large-413)
    (error_from_response(413, {"error": "BODY_TOO_LARGE", "message": "big"}, "store"),
     Status.MESSAGE_BODY_TOO_LARGE),
    (ValidationError("deliverAt is far", rule="T1"), Status.ILLEGAL_DELIVERY_TIME),
    (ValidationError("p", code="INVALID_PROPERTIES"), Status.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (ValidationError("x"), Status.BAD_REQUEST),
    (Unavailable("down"), Status.INTERNAL_SERVER_ERROR),
])
def test_errors_map_onto_the_protocols_statuses(error: Exception, status: Status) -> None:
    assert status_of(error) is status  # type: ignore[arg-type]


def test_the_access_key_is_read_from_the_signature_header() -> None:
    header = ("MQv2-HMAC-SHA1 Credential=clp_abc, SignedHeaders=x-mq-date-time, "
              "Signature=0f")
    assert access_key(header) == "clp_abc"
    assert access_key(None) is None and access_key("Bearer clp_abc") is None
    assert access_key("MQv2-HMAC-SHA1 SignedHeaders=x") is None


def test_a_fifo_batch_holds_one_message_per_group() -> None:
    def m(offset: int, group: str) -> dict[str, object]:
        return {"queueOffset": offset, "properties": {P.SHARDING_KEY: group} if group else {}}

    batch, next_offset = _one_per_group([m(5, "a"), m(6, "b"), m(7, ""), m(8, "a"),
                                         m(9, "c")], 10)
    assert [x["queueOffset"] for x in batch] == [5, 6, 7] and next_offset == 8
    batch, next_offset = _one_per_group([m(5, "a"), m(6, "b")], 12)
    assert len(batch) == 2 and next_offset == 12


def test_a_delivery_round_trips_through_its_json() -> None:
    delivery = Delivery(n="ab", d=123, a=2, m="id", r=1, c="client", t=100, g="g")
    assert Delivery.decode(delivery.encode()) == delivery
    assert Delivery.decode(b'{"n":"x","d":1,"a":1,"m":"i","later":true}').m == "i"
