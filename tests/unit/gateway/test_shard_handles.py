"""The gateway's handles and Redis names with store shards (DEC-gateway-shard-handles,
DEC-shard-keys): shard 0's are byte for byte those of a gateway from before shards, so a handle
of today's format still reads (as shard 0); another shard's are version 2 and carry it."""

from __future__ import annotations

import base64

import orjson
import pytest

from clepsydra_core import naming
from clepsydra_core.msgid import MAX_SHARD
from clepsydra_gateway.mapping import (
    GatewayError,
    RecallHandle,
    ReceiptHandle,
    Status,
    delivery_member,
    parse_member,
)
from clepsydra_gateway.state import GatewayState


def _raw(prefix: str, fields: list[object]) -> str:
    """A handle written field by field, as ``mapping`` writes them (the wire format)."""
    return prefix + base64.urlsafe_b64encode(orjson.dumps(fields)).decode().rstrip("=")


def test_a_version_1_receipt_handle_of_before_shards_reads_as_shard_0() -> None:
    # the exact text a gateway from before shards gave out (versioned formats: old ones read)
    old = _raw("cg1.", ["billing", "orders", 2, 17, "ab12cd34"])
    handle = ReceiptHandle.decode(old)
    assert handle == ReceiptHandle("billing", "orders", 2, 17, "ab12cd34", 0)
    assert handle.shard == 0
    assert handle.encode() == old  # shard 0 is still written as version 1, byte for byte


def test_a_receipt_handle_of_another_shard_is_version_2_and_round_trips() -> None:
    handle = ReceiptHandle("billing", "%RETRY%billing", 3, 1234, "ab12", shard=2)
    text = handle.encode()
    assert text.startswith("cg2.")
    assert text == _raw("cg2.", ["billing", "%RETRY%billing", 3, 1234, "ab12", 2])
    assert ReceiptHandle.decode(text) == handle
    assert ReceiptHandle.decode(text).shard == 2


@pytest.mark.parametrize("bad", [
    _raw("cg2.", ["g", "t", 0, 0, "n"]),             # version 2 without its shard
    _raw("cg1.", ["g", "t", 0, 0, "n", 2]),          # version 1 with a sixth field
    _raw("cg2.", ["g", "t", 0, 0, "n", 0]),          # shard 0 is never written as version 2
    _raw("cg2.", ["g", "t", 0, 0, "n", -1]),
    _raw("cg2.", ["g", "t", 0, 0, "n", True]),
    _raw("cg2.", ["g", "t", 0, 0, "n", "1"]),
    _raw("cg2.", ["g", "t", 0, 0, "n", MAX_SHARD + 1]),
    _raw("cg3.", ["g", "t", 0, 0, "n", 1]),          # a version this gateway does not know
    "cg2." + "!" * 12,
])
def test_a_malformed_sharded_receipt_handle_is_an_invalid_handle(bad: str) -> None:
    with pytest.raises(GatewayError) as caught:
        ReceiptHandle.decode(bad)
    assert caught.value.status == Status.INVALID_RECEIPT_HANDLE


def test_recall_handles_carry_the_shard_the_same_way() -> None:
    old = _raw("cr1.", ["orders", "0102ABC"])
    assert RecallHandle.decode(old) == RecallHandle("orders", "0102ABC", 0)
    assert RecallHandle("orders", "0102ABC").encode() == old
    sharded = RecallHandle("orders", "0102ABC", 1)
    assert sharded.encode().startswith("cr2.")
    assert RecallHandle.decode(sharded.encode()) == sharded
    for bad in (_raw("cr2.", ["orders", "0102ABC"]), _raw("cr2.", ["orders", "0102ABC", 0]),
                _raw("cg2.", ["orders", "0102ABC", 1])):
        with pytest.raises(GatewayError) as caught:
            RecallHandle.decode(bad)
        assert caught.value.status == Status.BAD_REQUEST


def test_deadline_members_and_redis_keys_keep_shard_0s_names() -> None:
    # DEC-shard-keys: shard 0 keeps the names of a one-store stack, the others carry the shard
    assert delivery_member("g", "t", 3, 9) == "g/t/3/9"
    assert delivery_member("g", "t", 3, 9, 2) == "g/t/3/9/2"
    assert parse_member("g/t/3/9") == ("g", "t", 3, 9, 0)
    assert parse_member("g/%RETRY%g/3/9/2") == ("g", "%RETRY%g", 3, 9, 2)
    assert ReceiptHandle("g", "t", 3, 9, "n", 2).member == "g/t/3/9/2"
    assert GatewayState.keys("g", "t", 3, shard=0) == (
        "clepsydra:gateway:g/t/3:cursor", "clepsydra:gateway:g/t/3:inflight",
        "clepsydra:gateway:g/t/3:committed")
    assert naming.gateway_queue_key("g", "t", 3) == "clepsydra:gateway:g/t/3"
    cursor, inflight, committed = GatewayState.keys("g", "t", 3, shard=2)
    assert cursor == "clepsydra:gateway:shard:2:g/t/3:cursor"
    assert len({cursor, inflight, committed} & set(GatewayState.keys("g", "t", 3, shard=0))) == 0
