"""Wire and on-disk formats: the CommitLog record, the 20-byte ConsumeQueue entry, and the
JSON view of a message that the HTTP APIs return.

CommitLog record, big-endian (version 1; the magic carries the version):

    total_size i32 | magic i32 | body_crc u32 | queue_id i32 | flag i32 | queue_offset i64 |
    commitlog_offset i64 | sys_flag i32 | born_timestamp i64 | born_host 8B |
    store_timestamp i64 | store_host 8B | reconsume_times i32 |
    body_length i32 | body | topic_length u8 | topic | properties_length i32 | properties

``born_host``/``store_host`` are IPv4 + port (see msgid). Tags, keys and the message's unique id
travel in properties (`TAGS`, `KEYS`, `UNIQ_KEY`): the record layout did not change when
msgIds became unique ids, and a record without `UNIQ_KEY` (written before) has its offsetMsgId
as its msgId. A segment whose tail cannot hold the next record ends with an
end-of-segment marker: ``total_size = remaining bytes | magic = END_MAGIC``.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self

from clepsydra_core import properties as P
from clepsydra_core.errors import CorruptRecordError
from clepsydra_core.msgid import unpack_host

MAGIC_V1 = 0x434C5331  # "CLS1"
END_MAGIC = 0x434C5345  # "CLSE": end of segment
MIN_END_MARKER = 8

_HEADER = struct.Struct(">iiIiiqqiq8sq8sii")
RECORD_HEADER = _HEADER
"""Fixed part of a record, up to and including body_length (for writers that pack the header
themselves once the offsets are known: :func:`pack_header`)."""
HEADER_SIZE = _HEADER.size  # up to and including body_length

# sysFlag bits, as in RocketMQ (MessageSysFlag): bits 2-3 carry the transaction type.
SYS_FLAG_TRANSACTION_MASK = 0xC
SYS_FLAG_TRANSACTION_PREPARED = 0x4
SYS_FLAG_TRANSACTION_COMMIT = 0x8
SYS_FLAG_TRANSACTION_ROLLBACK = 0xC
U8 = struct.Struct(">B")
"""The topic length of a record."""
I32 = struct.Struct(">i")
"""The properties length of a record."""
_END = struct.Struct(">ii")
_PROPS_LEN = I32.unpack_from


def tags_code(tags: str | None) -> int:
    """SPEC S2: the ConsumeQueue tagsCode of an ordinary topic's message, a stable hash of its
    tags string (0 without tags); the schedule topic's entries carry the deliver time instead."""
    return tags_code_of(tags.encode()) if tags else 0


def tags_code_of(tags_raw: bytes) -> int:
    """:func:`tags_code` of tags already encoded as UTF-8 (writers that hold the bytes)."""
    return zlib.crc32(tags_raw)


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One ConsumeQueue slot, 20 bytes big-endian:
    commitlog_offset int64 | size int32 | tags_code int64 (deliver time for the schedule topic)."""

    commitlog_offset: int
    size: int
    tags_code: int
    LAYOUT: ClassVar[struct.Struct] = struct.Struct(">qiq")
    SIZE: ClassVar[int] = 20

    def encode(self) -> bytes:
        return self.LAYOUT.pack(self.commitlog_offset, self.size, self.tags_code)

    @classmethod
    def decode(cls, raw: bytes | memoryview, pos: int = 0) -> Self:
        try:
            return cls(*cls.LAYOUT.unpack_from(raw, pos))
        except struct.error as exc:
            raise CorruptRecordError(f"queue entry at byte {pos} is short") from exc


@dataclass(frozen=True, slots=True)
class CommitLogRecord:
    """A message as stored in the CommitLog (every SPEC "Words" field)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    queue_offset: int = 0
    commitlog_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\0" * 8
    store_timestamp: int = 0
    store_host: bytes = b"\0" * 8
    reconsume_times: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(P.TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(P.KEYS, "").split()

    @property
    def offset_msg_id(self) -> str:
        """Where this record is stored (store host + CommitLog offset): one copy."""
        return offset_msg_id(self.store_host.hex().upper(), self.commitlog_offset)

    @property
    def msg_id(self) -> str:
        """The message's unique id (``UNIQ_KEY``), the same in every copy; the offsetMsgId
        for a record stored before unique ids."""
        return self.properties.get(P.UNIQ_KEY) or self.offset_msg_id

    def with_(self, **changes: Any) -> CommitLogRecord:
        return replace(self, **changes)

    def encode(self) -> bytes:
        """The record's bytes; total_size covers the whole record."""
        return encode_record(self)

    @classmethod
    def decode(cls, raw: bytes | memoryview, pos: int = 0) -> Self:
        """Decode the record starting at ``pos``; CorruptRecordError if it is not whole and
        valid (size, magic, lengths and body CRC all checked)."""
        record, _size = decode_record(raw, pos)
        return record  # type: ignore[return-value]


def is_transaction_prepared_or_rollback(sys_flag: int) -> bool:
    """S1: such messages are never parked in the schedule topic."""
    return (sys_flag & SYS_FLAG_TRANSACTION_MASK) in (
        SYS_FLAG_TRANSACTION_PREPARED, SYS_FLAG_TRANSACTION_ROLLBACK)


def pack_header(size: int, crc: int, queue_id: int, flag: int, queue_offset: int,
                commitlog_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes,
                store_timestamp: int, store_host: bytes, reconsume_times: int,
                body_length: int) -> bytes:
    """The fixed header of a record whose tail is ``size - HEADER_SIZE`` bytes long: every
    writer packs its headers here."""
    return _HEADER.pack(size, MAGIC_V1, crc, queue_id, flag, queue_offset, commitlog_offset,
                        sys_flag, born_timestamp, born_host, store_timestamp, store_host,
                        reconsume_times, body_length)


def offset_msg_id(host_hex: str, commitlog_offset: int) -> str:
    """The offsetMsgId of the record at ``commitlog_offset`` (one copy's place): ``host_hex``
    is the store host's 8 packed bytes in upper-case hex (``host.hex().upper()``), followed by
    the offset as 16 hex digits (equal to :func:`clepsydra_core.msgid.encode_msg_id`)."""
    return f"{host_hex}{commitlog_offset:016X}"


def encode_record_tail(body: bytes, topic_raw: bytes, props_raw: bytes) -> bytes:
    """Everything after the fixed header: ``body | topic_length | topic | properties_length |
    properties``. The whole record is ``RECORD_HEADER.pack(...) + tail`` with
    ``total_size = HEADER_SIZE + len(tail)``. This and :func:`encode_record` are the format's
    plain reference writer, for tests and tools; the store writes every record through its
    codec (``clepsydra_store.engine.write.codec.encode_tail``), whose bytes its tests hold equal to
    a reference encoding."""
    return b"".join((body, U8.pack(len(topic_raw)), topic_raw, I32.pack(len(props_raw)),
                     props_raw))


def encode_record(r: CommitLogRecord, props_raw: bytes | None = None) -> bytes:
    if props_raw is None:
        props_raw = P.encode_properties(r.properties)
    body = r.body
    tail = encode_record_tail(body, r.topic.encode(), props_raw)
    size = HEADER_SIZE + len(tail)
    return pack_header(size, zlib.crc32(body), r.queue_id, r.flag, r.queue_offset,
                       r.commitlog_offset, r.sys_flag, r.born_timestamp, r.born_host,
                       r.store_timestamp, r.store_host, r.reconsume_times, len(body)) + tail


def peek_size_magic(raw: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(total_size, magic) at pos; (0, 0) when fewer than 8 bytes remain."""
    if len(raw) - pos < MIN_END_MARKER:
        return 0, 0
    size, magic = _END.unpack_from(raw, pos)
    return size, magic


def encode_end_marker(remaining: int) -> bytes:
    """End-of-segment marker filling ``remaining`` bytes; writers always leave at least 8."""
    if remaining < MIN_END_MARKER:
        raise ValueError(f"an end marker needs {MIN_END_MARKER} bytes, {remaining} remain")
    return _END.pack(remaining, END_MAGIC) + b"\0" * (remaining - MIN_END_MARKER)


def decode_record(raw: bytes | memoryview, pos: int = 0) -> tuple[CommitLogRecord, int]:
    """(record, total_size) at pos; CorruptRecordError if torn or invalid."""
    (size, queue_id, flag, queue_offset, commitlog_offset, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, body, topic, props) = _decode_fields(raw, pos)
    record = CommitLogRecord(
        topic=topic, body=body, queue_id=queue_id, flag=flag, properties=props,
        queue_offset=queue_offset, commitlog_offset=commitlog_offset, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=born_host, store_timestamp=store_ts,
        store_host=store_host, reconsume_times=reconsume,
    )
    return record, size


def decode_view(raw: bytes | memoryview, pos: int = 0, with_body: bool = True
                ) -> tuple[dict[str, Any], int]:
    """(the record's v1 JSON view, total_size) at pos: ``message_to_json(decode_record(raw,
    pos)[0], with_body=with_body)`` without the record between them (a pull's page is built
    from the bytes read, DEC-pull-json-view); CorruptRecordError as :func:`decode_record`."""
    (size, queue_id, flag, queue_offset, commitlog_offset, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, body, topic, props) = _decode_fields(raw, pos)
    return _json_view(topic, body, queue_id, flag, props, queue_offset, commitlog_offset,
                      sys_flag, born_ts, born_host, store_ts, store_host, reconsume,
                      with_body), size


_TOPICS: dict[bytes, str] = {}
"""Topic names as decoded (a store has few; every record read decodes one)."""
_TOPICS_MAX = 4096


def _decode_fields(raw: bytes | memoryview, pos: int) -> tuple[
        int, int, int, int, int, int, int, bytes, int, bytes, int, bytes, str, dict[str, str]]:
    """(total_size, queue_id, flag, queue_offset, commitlog_offset, sys_flag, born_timestamp,
    born_host, store_timestamp, store_host, reconsume_times, body, topic, properties) of the
    record at pos, every length, the magic and the body CRC checked: the one reader of the
    record layout (:func:`decode_record`, :func:`decode_view`)."""
    avail = len(raw) - pos
    if avail < HEADER_SIZE:
        raise CorruptRecordError(f"record at byte {pos}: only {avail} bytes remain")
    (size, magic, crc, queue_id, flag, queue_offset, commitlog_offset, sys_flag, born_ts,
     born_host, store_ts, store_host, reconsume, body_len) = _HEADER.unpack_from(raw, pos)
    if magic != MAGIC_V1:
        raise CorruptRecordError(f"record at byte {pos}: bad magic {magic:#x}")
    if size < HEADER_SIZE + 5 or size > avail:
        raise CorruptRecordError(f"record at byte {pos}: size {size} does not fit ({avail} left)")
    start = pos
    if not isinstance(raw, bytes):  # a memoryview, a mapped segment: this record's bytes
        raw, start = bytes(raw[pos:pos + size]), 0
    p = start + HEADER_SIZE
    end = start + size
    if body_len < 0 or p + body_len + 5 > end:
        raise CorruptRecordError(f"record at byte {pos}: body length {body_len} is wrong")
    body = raw[p:p + body_len]
    if zlib.crc32(body) != crc:
        raise CorruptRecordError(f"record at byte {pos}: body CRC mismatch")
    p += body_len
    topic_len = raw[p]
    p += 1
    if p + topic_len + 4 > end:
        raise CorruptRecordError(f"record at byte {pos}: topic length {topic_len} is wrong")
    topic_raw = raw[p:p + topic_len]
    topic = _TOPICS.get(topic_raw)
    if topic is None:
        try:
            topic = topic_raw.decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"record at byte {pos}: topic is not UTF-8") from exc
        if len(_TOPICS) < _TOPICS_MAX:
            _TOPICS[topic_raw] = topic
    p += topic_len
    props_len = _PROPS_LEN(raw, p)[0]
    p += 4
    if props_len < 0 or p + props_len != end:
        raise CorruptRecordError(f"record at byte {pos}: properties length {props_len} is wrong")
    props = P.decode_properties(raw, p, end)
    return (size, queue_id, flag, queue_offset, commitlog_offset, sys_flag, born_ts, born_host,
            store_ts, store_host, reconsume, body, topic, props)


def message_to_json(r: CommitLogRecord, *, with_body: bool = True) -> dict[str, Any]:
    """The v1 JSON view of a stored message: every field, camelCase, properties as an object;
    ``msgId`` is the message's unique id, ``offsetMsgId`` this record's place. The body goes as
    ``body`` when it is UTF-8 text, else as ``bodyBase64``."""
    return _json_view(r.topic, r.body, r.queue_id, r.flag, r.properties, r.queue_offset,
                      r.commitlog_offset, r.sys_flag, r.born_timestamp, r.born_host,
                      r.store_timestamp, r.store_host, r.reconsume_times, with_body)


_HOST_HEX: dict[bytes, str] = {}
"""A store host's 8 bytes in upper-case hex (every view's offsetMsgId; a store sees few)."""


def _json_view(topic: str, body: bytes, queue_id: int, flag: int, props: dict[str, str],
               queue_offset: int, commitlog_offset: int, sys_flag: int, born_ts: int,
               born_host: bytes, store_ts: int, store_host: bytes, reconsume: int,
               with_body: bool) -> dict[str, Any]:
    """:func:`message_to_json` of these fields (the one writer of the view)."""
    host_hex = _HOST_HEX.get(store_host)
    if host_hex is None:
        host_hex = store_host.hex().upper()
        if len(_HOST_HEX) < _TOPICS_MAX:
            _HOST_HEX[store_host] = host_hex
    place = offset_msg_id(host_hex, commitlog_offset)
    get = props.get
    out: dict[str, Any] = {
        "msgId": get(P.UNIQ_KEY) or place,
        "offsetMsgId": place,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": queue_offset,
        "commitLogOffset": commitlog_offset,
        "tags": get(P.TAGS),
        "keys": get(P.KEYS, ""),
        "flag": flag,
        "properties": props,
        "storeTimestamp": store_ts,
        "bornTimestamp": born_ts,
        "bornHost": unpack_host(born_host),
        "storeHost": unpack_host(store_host),
        "reconsumeTimes": reconsume,
        "sysFlag": sys_flag,
        "bodySize": len(body),
    }
    if with_body:
        try:
            out["body"] = body.decode()
        except UnicodeDecodeError:
            out["bodyBase64"] = base64.b64encode(body).decode()
    return out


def body_from_json(message: dict[str, Any]) -> bytes:
    """The body of a JSON message view (``body`` or ``bodyBase64``)."""
    if "bodyBase64" in message:
        return base64.b64decode(message["bodyBase64"])
    return str(message.get("body", "")).encode()
