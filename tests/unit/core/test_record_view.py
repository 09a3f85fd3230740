"""A pulled record's JSON view read straight from its bytes (``decode_view``,
DEC-pull-json-view) against the v1 view as it was written before: the record decoded into a
``CommitLogRecord`` with its properties' dict, then ``message_to_json``. Every JSON value equal,
byte for byte once encoded, on drawn records; the same errors on torn and corrupt bytes
(SPEC P3: a record is checked by size and CRC); properties decoded as before (SPEC C3 filters
by the tags they carry)."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core import properties as P
from clepsydra_core.errors import CorruptRecordError
from clepsydra_core.msgid import unpack_host
from clepsydra_core.records import (
    CommitLogRecord,
    decode_record,
    decode_view,
    encode_record,
    message_to_json,
)

_NAME_LEN = struct.Struct(">H")
_VALUE_LEN = struct.Struct(">I")


def old_decode_properties(raw: bytes) -> dict[str, str]:
    """The properties' decoder before DEC-pull-json-view (the reference)."""
    props: dict[str, str] = {}
    pos, end = 0, len(raw)
    try:
        while pos < end:
            (nlen,) = _NAME_LEN.unpack_from(raw, pos)
            pos += 2
            name = bytes(raw[pos:pos + nlen]).decode()
            pos += nlen
            (vlen,) = _VALUE_LEN.unpack_from(raw, pos)
            pos += 4
            if pos + vlen > end:
                raise CorruptRecordError("property value runs past the properties block")
            props[name] = bytes(raw[pos:pos + vlen]).decode()
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"properties do not decode: {exc}") from exc
    return props


def old_message_to_json(r: CommitLogRecord, with_body: bool) -> dict[str, Any]:
    """The v1 view as ``message_to_json`` wrote it before DEC-pull-json-view (the reference)."""
    out: dict[str, Any] = {
        "msgId": r.properties.get(P.UNIQ_KEY) or r.offset_msg_id,
        "offsetMsgId": r.offset_msg_id,
        "topic": r.topic,
        "queueId": r.queue_id,
        "queueOffset": r.queue_offset,
        "commitLogOffset": r.commitlog_offset,
        "tags": r.properties.get(P.TAGS),
        "keys": r.properties.get(P.KEYS, ""),
        "flag": r.flag,
        "properties": r.properties,
        "storeTimestamp": r.store_timestamp,
        "bornTimestamp": r.born_timestamp,
        "bornHost": unpack_host(r.born_host),
        "storeHost": unpack_host(r.store_host),
        "reconsumeTimes": r.reconsume_times,
        "sysFlag": r.sys_flag,
        "bodySize": len(r.body),
    }
    if with_body:
        try:
            out["body"] = r.body.decode()
        except UnicodeDecodeError:
            out["bodyBase64"] = base64.b64encode(r.body).decode()
    return out


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_NAMES = st.sampled_from([P.TAGS, P.KEYS, P.UNIQ_KEY, P.DELIVER_TS, P.REAL_TOPIC, P.REAL_QID,
                          "名前", "a b", ""]) | _TEXT
_I32 = st.integers(-2**31, 2**31 - 1)
_I64 = st.integers(0, 2**62)


@st.composite
def records(draw: st.DrawFn) -> CommitLogRecord:
    return CommitLogRecord(
        topic=draw(st.text(st.characters(exclude_categories=("Cs",)), min_size=1,
                           max_size=30).filter(lambda t: len(t.encode()) < 256)),
        body=draw(st.binary(max_size=64) | _TEXT.map(str.encode)),
        queue_id=draw(_I32), flag=draw(_I32),
        properties=draw(st.dictionaries(_NAMES, _TEXT, max_size=8)),
        queue_offset=draw(_I64), commitlog_offset=draw(_I64), sys_flag=draw(_I32),
        born_timestamp=draw(_I64), born_host=draw(st.binary(min_size=8, max_size=8)),
        store_timestamp=draw(_I64), store_host=draw(st.binary(min_size=8, max_size=8)),
        reconsume_times=draw(_I32))


@settings(max_examples=400, deadline=None)
@given(records(), st.booleans(), st.binary(max_size=16))
def test_view_from_the_bytes_equals_the_old_view_of_the_record(
        record: CommitLogRecord, with_body: bool, before: bytes) -> None:
    raw = before + encode_record(record)
    view, size = decode_view(raw, len(before), with_body)
    old_record, old_size = decode_record(raw, len(before))
    old = old_message_to_json(record, with_body)
    assert size == old_size == len(raw) - len(before)
    assert view == old
    assert list(view) == list(old)  # the same keys in the same order
    assert orjson.dumps(view) == orjson.dumps(old)
    assert message_to_json(record, with_body=with_body) == old
    assert old_record == record


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, _TEXT, max_size=8), st.data())
def test_properties_decode_as_before_whole_and_torn(props: dict[str, str],
                                                    data: st.DataObject) -> None:
    raw = P.encode_properties(props)
    assert P.decode_properties(raw) == old_decode_properties(raw) == props
    assert P.decode_properties(b"xy" + raw + b"z", 2, 2 + len(raw)) == props
    cut = data.draw(st.integers(0, len(raw)))
    torn = raw[:cut]
    try:
        expected: dict[str, str] | None = old_decode_properties(torn)
    except CorruptRecordError:
        expected = None
    if expected is None:
        with pytest.raises(CorruptRecordError):
            P.decode_properties(torn)
        with pytest.raises(CorruptRecordError):  # what follows the block is not read
            P.decode_properties(torn + raw[cut:] + b"\0" * 8, 0, cut)
    else:
        assert P.decode_properties(torn) == expected


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_a_torn_or_corrupt_record_is_refused_by_both(record: CommitLogRecord,
                                                     data: st.DataObject) -> None:
    raw = bytearray(encode_record(record))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
    old: Any
    try:
        old = old_message_to_json(decode_record(bytes(raw))[0], True)
    except CorruptRecordError:
        old = CorruptRecordError
    try:
        new: Any = decode_view(bytes(raw))[0]
    except CorruptRecordError:
        new = CorruptRecordError
    assert new == old
    view_of_a_memoryview: Any
    try:
        view_of_a_memoryview = decode_view(memoryview(bytes(raw)))[0]
    except CorruptRecordError:
        view_of_a_memoryview = CorruptRecordError
    assert view_of_a_memoryview == old


def test_a_view_of_text_and_of_binary_bodies() -> None:
    text = CommitLogRecord(topic="t", body="héllo".encode(), properties={P.TAGS: "a"})
    binary = CommitLogRecord(topic="t", body=b"\xff\x00", properties={})
    assert decode_view(encode_record(text))[0]["body"] == "héllo"
    view = decode_view(encode_record(binary))[0]
    assert view["bodyBase64"] == base64.b64encode(b"\xff\x00").decode()
    assert "body" not in view and view["tags"] is None and view["keys"] == ""
    headers_only = decode_view(encode_record(text), 0, False)[0]
    assert "body" not in headers_only and headers_only["bodySize"] == 6
