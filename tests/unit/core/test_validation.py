"""Input rules for produce and pull requests (SPEC P1, S3) and the msgId (SPEC Words)."""

from __future__ import annotations

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import Forbidden, ValidationError
from clepsydra_core.msgid import MsgId, decode_msg_id, encode_msg_id, pack_host, unpack_host
from clepsydra_core.validation import (
    DEFAULT_MAX_BODY_BYTES,
    check_consumable,
    check_producible,
    validate_body,
    validate_group_name,
    validate_properties,
    validate_text,
    validate_topic_name,
)


@pytest.mark.parametrize("topic", ["orders", "A-b_c|9", "x" * 127, "%RETRY%group-1",
                                   "%DLQ%group-1", naming.SCHEDULE_TOPIC])
def test_valid_topic_names(topic: str) -> None:  # SPEC P1
    assert validate_topic_name(topic) == topic


@pytest.mark.parametrize("topic", ["", "x" * 128, "a b", "a/b", "a.b", "tópico", "a\n",
                                   "orders\n", "\norders", "a:b", "50%", "%OTHER%x", None, 5])
def test_invalid_topic_names(topic: object) -> None:  # SPEC P1
    with pytest.raises(ValidationError) as info:
        validate_topic_name(topic)
    assert info.value.code == "INVALID_TOPIC"
    assert "P1" in info.value.message


def test_group_names_refuse_percent_and_overlong() -> None:  # SPEC P1
    assert validate_group_name("billing-consumers") == "billing-consumers"
    for bad in ("", "a%b", "a b", "g" * 121):
        with pytest.raises(ValidationError):
            validate_group_name(bad)


def test_body_at_most_4_mib() -> None:  # SPEC P1
    assert DEFAULT_MAX_BODY_BYTES == 4 * 1024 * 1024
    body = b"\0" * DEFAULT_MAX_BODY_BYTES
    assert validate_body(body) is body
    assert validate_body(b"") == b""
    with pytest.raises(ValidationError) as info:
        validate_body(body + b"\0")
    assert (info.value.code, info.value.http_status) == ("BODY_TOO_LARGE", 413)  # DEC-too-large-413
    with pytest.raises(ValidationError):
        validate_body(b"12345", max_body_bytes=4)


def test_properties_accept_any_unicode_text() -> None:  # SPEC P1
    props = {"emoji": "🚀", "cjk": "延迟", "ctl": "\x00\n\x01", "empty": ""}
    assert validate_properties(props) == props
    assert validate_properties(None) == {}


@pytest.mark.parametrize("name", [P.DELAY, P.REAL_TOPIC, P.REAL_QID, P.TAGS, P.KEYS,
                                  P.DELIVER_TS, P.SCHEDULE_OFFSET, P.DLQ_REASON])
def test_reserved_property_names_are_refused(name: str) -> None:  # SPEC P1
    with pytest.raises(ValidationError, match="reserved"):
        validate_properties({name: "1"})
    assert validate_properties({name: "1"}, allow_reserved=True) == {name: "1"}


def test_client_settable_reserved_names_pass() -> None:
    props = {name: "v" for name in P.CLIENT_SETTABLE}
    assert validate_properties(props) == props


@pytest.mark.parametrize("props", [{"k": "\ud800"}, {"\udc00": "v"}, {"k": "ok\udfffok"}])
def test_lone_surrogate_is_refused(props: dict[str, str]) -> None:  # SPEC P1
    with pytest.raises(ValidationError) as info:
        validate_properties(props)
    assert info.value.code == "INVALID_PROPERTIES"


@pytest.mark.parametrize("props", [["a"], "a=b", {"k": 1}, {1: "v"}, {"": "v"},
                                   {"big": "x" * (64 * 1024)}])
def test_malformed_properties_are_refused(props: object) -> None:  # SPEC P1
    with pytest.raises(ValidationError):
        validate_properties(props)


def test_optional_text_fields() -> None:
    assert validate_text(None, "tags") is None
    assert validate_text("TagA", "tags") == "TagA"
    for bad in (3, "\ud800"):
        with pytest.raises(ValidationError, match="tags"):
            validate_text(bad, "tags")


@pytest.mark.parametrize("topic", [naming.SCHEDULE_TOPIC, naming.SCHEDULE_ERROR_TOPIC,
                                   naming.TRANSACTION_HALF_TOPIC, naming.dlq_topic("g")])
def test_clients_cannot_produce_to_system_topics(topic: str) -> None:  # SPEC S3
    with pytest.raises(Forbidden) as info:
        check_producible(topic)
    assert info.value.http_status == 403
    assert "S3" in info.value.message


def test_plain_topics_and_retry_topics_are_producible() -> None:  # SPEC S3, R9, R10
    check_producible("orders")
    check_producible(naming.retry_topic("g"))


def test_schedule_topic_is_never_consumable() -> None:  # SPEC S3
    with pytest.raises(Forbidden, match="S3"):
        check_consumable(naming.SCHEDULE_TOPIC)
    for topic in ("orders", naming.retry_topic("g"), naming.dlq_topic("g")):
        check_consumable(topic)


def test_msg_id_locates_host_and_offset() -> None:  # SPEC Words: msgId
    msg_id = encode_msg_id(pack_host("10.1.2.3:8081"), 123_456_789_012)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert decode_msg_id(msg_id) == MsgId("10.1.2.3", 8081, 123_456_789_012)
    assert decode_msg_id(msg_id.lower()) == decode_msg_id(msg_id)
    assert unpack_host(pack_host("127.0.0.1:65535")) == "127.0.0.1:65535"
    assert pack_host("not-a-host") == b"\0" * 8


@pytest.mark.parametrize("bad", ["", "xyz", "7F000001", "7F00000100001F9100000000000010",
                                 "7F00000100001F910000000000001000AA", "G" * 32,
                                 "7F000001 00001F91 0000000000001000"])
def test_invalid_msg_id_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError) as info:
        decode_msg_id(bad)
    assert info.value.code == "INVALID_MSG_ID"
    assert info.value.http_status == 400
