"""CommitLog records, properties encoding, ConsumeQueue entries and the end-of-segment marker
(docs/semantics.md; SPEC P1, P3)."""

from __future__ import annotations

import struct
import zlib

import pytest

from clepsydra_core import properties as P
from clepsydra_core.errors import CorruptRecordError
from clepsydra_core.msgid import pack_host
from clepsydra_core.records import (
    END_MAGIC,
    HEADER_SIZE,
    MAGIC_V1,
    CommitLogRecord,
    QueueEntry,
    body_from_json,
    decode_record,
    encode_end_marker,
    message_to_json,
    peek_size_magic,
    tags_code,
)

UNICODE_PROPERTIES = {
    "emoji": "⏳🚀👩‍👩‍👧",
    "cjk": "延迟消息 重试 死信队列",
    "control": "a\x00b\x01c\n\r\t\x1f\x7f\u2028\u2029d",
    "separators": "k=v;k2\x01v2\x02",
    "empty": "",
    "名前": "値",
    P.TAGS: "TagA",
    P.KEYS: "k1 k2",
}


def full_record(**changes: object) -> CommitLogRecord:
    record = CommitLogRecord(
        topic="orders", body=b"hello", queue_id=3, flag=7, properties=dict(UNICODE_PROPERTIES),
        queue_offset=42, commitlog_offset=1 << 33, sys_flag=0x4, born_timestamp=1_700_000_000_123,
        born_host=pack_host("10.0.0.5:5555"), store_timestamp=1_700_000_000_456,
        store_host=pack_host("127.0.0.1:8081"), reconsume_times=2,
    )
    return record.with_(**changes)


def test_record_round_trips_every_field() -> None:
    record = full_record()
    raw = record.encode()
    assert struct.unpack_from(">i", raw)[0] == len(raw)
    assert struct.unpack_from(">i", raw, 4)[0] == MAGIC_V1
    assert CommitLogRecord.decode(raw) == record


def test_properties_round_trip_any_unicode() -> None:  # SPEC P1: no separator characters
    raw = P.encode_properties(UNICODE_PROPERTIES)
    assert P.decode_properties(raw) == UNICODE_PROPERTIES
    assert P.decode_properties(P.encode_properties({})) == {}


@pytest.mark.parametrize("body", [b"", bytes(range(256)), b"\xff\xfe\x00" * 1000,
                                  "утф-8 ✓".encode()])
def test_record_round_trips_empty_and_binary_bodies(body: bytes) -> None:
    record = full_record(body=body, properties={})
    assert CommitLogRecord.decode(record.encode()).body == body


def test_records_decode_back_to_back_at_their_positions() -> None:
    first, second = full_record(body=b"one"), full_record(body=b"two", topic="other")
    buf = b"\0" * 7 + first.encode() + second.encode()
    decoded, size = decode_record(buf, 7)
    assert decoded == first
    assert CommitLogRecord.decode(memoryview(buf), 7 + size) == second


def test_bad_magic_is_corrupt() -> None:
    raw = bytearray(full_record().encode())
    struct.pack_into(">i", raw, 4, 0x12345678)
    with pytest.raises(CorruptRecordError, match="magic"):
        CommitLogRecord.decode(bytes(raw))


def test_flipped_body_byte_fails_the_crc() -> None:  # SPEC P3: checked by size and CRC
    raw = bytearray(full_record(body=b"payload").encode())
    raw[HEADER_SIZE] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        CommitLogRecord.decode(bytes(raw))


def test_every_truncation_is_corrupt() -> None:  # SPEC P3: a torn tail is detected
    raw = full_record(body=b"x" * 40).encode()
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            CommitLogRecord.decode(raw[:cut])


def test_size_field_that_disagrees_with_the_record_is_corrupt() -> None:
    raw = bytearray(full_record().encode())
    struct.pack_into(">i", raw, 0, len(raw) + 1)
    with pytest.raises(CorruptRecordError, match="size"):
        CommitLogRecord.decode(bytes(raw))  # runs past the buffer
    with pytest.raises(CorruptRecordError):
        CommitLogRecord.decode(bytes(raw) + b"\0")  # one byte the lengths do not account for
    struct.pack_into(">i", raw, 0, HEADER_SIZE - 1)
    with pytest.raises(CorruptRecordError, match="size"):
        CommitLogRecord.decode(bytes(raw))


def test_mangled_properties_block_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        P.decode_properties(struct.pack(">H", 3) + b"abc" + struct.pack(">I", 99) + b"short")
    with pytest.raises(CorruptRecordError):
        P.decode_properties(struct.pack(">H", 2) + b"\xff\xfe" + struct.pack(">I", 0))
    with pytest.raises(CorruptRecordError):
        P.decode_properties(b"\x00")


def test_queue_entry_is_20_bytes_big_endian() -> None:
    entry = QueueEntry(commitlog_offset=1, size=2, tags_code=3)
    raw = entry.encode()
    assert len(raw) == QueueEntry.SIZE == 20
    assert raw == bytes.fromhex("0000000000000001" "00000002" "0000000000000003")
    assert QueueEntry.decode(raw) == entry


def test_queue_entry_decodes_at_a_position_and_refuses_short_input() -> None:
    entries = [QueueEntry(i * 100, 50 + i, 1_700_000_000_000 + i) for i in range(3)]
    buf = b"".join(e.encode() for e in entries)
    assert [QueueEntry.decode(buf, 20 * i) for i in range(3)] == entries
    with pytest.raises(CorruptRecordError):
        QueueEntry.decode(buf[:19])
    with pytest.raises(CorruptRecordError):
        QueueEntry.decode(buf, 50)


def test_end_marker_fills_the_tail_and_is_not_a_record() -> None:
    marker = encode_end_marker(100)
    assert len(marker) == 100
    assert peek_size_magic(marker, 0) == (100, END_MAGIC)
    assert peek_size_magic(b"\0" * 7, 0) == (0, 0)
    with pytest.raises(CorruptRecordError):
        CommitLogRecord.decode(marker)


def test_end_marker_refuses_a_tail_shorter_than_its_header() -> None:
    # a marker of fewer than 8 bytes would overrun its segment
    with pytest.raises(ValueError):
        encode_end_marker(7)


def test_tags_code_is_a_stable_hash() -> None:
    assert tags_code(None) == tags_code("") == 0
    assert tags_code("TagA") == zlib.crc32(b"TagA") == tags_code("TagA")
    assert tags_code("TagA") != tags_code("TagB")


def test_message_json_view_has_every_word_and_the_body_form() -> None:
    record = full_record()
    view = message_to_json(record)
    assert view["msgId"] == record.msg_id and len(view["msgId"]) == 32
    assert view["tags"] == "TagA" and view["keys"] == "k1 k2"
    assert view["bornHost"] == "10.0.0.5:5555" and view["storeHost"] == "127.0.0.1:8081"
    assert {"queueId", "queueOffset", "commitLogOffset", "flag", "properties", "storeTimestamp",
            "bornTimestamp", "reconsumeTimes", "sysFlag"} <= view.keys()
    assert view["body"] == "hello" and "bodyBase64" not in view
    binary = message_to_json(full_record(body=b"\xff\x00"))
    assert "body" not in binary and body_from_json(binary) == b"\xff\x00"
    assert body_from_json(view) == b"hello"
    assert "body" not in message_to_json(record, with_body=False)


def test_a_record_without_a_unique_id_reads_as_before() -> None:
    # the layout is unchanged (still MAGIC_V1): a record written before unique ids
    # decodes alike, and its msgId is its offsetMsgId (store host + CommitLog offset)
    old = full_record()
    raw = old.encode()
    assert struct.unpack_from(">i", raw, 4)[0] == MAGIC_V1
    decoded, _ = decode_record(raw)
    assert decoded == old and P.UNIQ_KEY not in decoded.properties
    assert decoded.msg_id == decoded.offset_msg_id == "7F00000100001F910000000200000000"
    view = message_to_json(decoded)
    assert view["msgId"] == view["offsetMsgId"] == decoded.offset_msg_id
    new = full_record(properties={**UNICODE_PROPERTIES, P.UNIQ_KEY: "AB" * 16})
    view = message_to_json(decode_record(new.encode())[0])
    assert (view["msgId"], view["offsetMsgId"]) == ("AB" * 16, decoded.offset_msg_id)
