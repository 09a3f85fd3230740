"""The record codec, once (DEC-one-record-codec): random produce requests taken at the HTTP layer's
parser (``api.produce.parse_messages``: the fast parser and the wire type) and appended by the
engine round-trip every field, and their stored bytes and ConsumeQueue entries equal a
reference encoding written plainly here from the formats of SPEC S1, S2, R10, T1 and
``clepsydra_core.records`` (not from the store's code). Recovery re-dispatches them to the same
entries (P3). The hand-over's two D4 forms (dict and splice) give the same bytes. Every other
record the store writes (copies, the D7 park, timers' parks, tombstones and hand-overs, the
carry-forward) has the reference layout with the properties its rule gives, and no module but
the codec writes a piece of a record."""

from __future__ import annotations

import base64
import shutil
import socket
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import decode_msg_id, encode_msg_id
from clepsydra_core.records import CommitLogRecord, QueueEntry, decode_record, offset_msg_id
from clepsydra_store.api.produce import parse_messages
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import CopyRequest, PutRequest, PutResult
from clepsydra_store.engine.write.codec import splice_properties, splice_template
from tests.unit.store.conftest import OpenStore, engine_config

BORN_HOST = socket.inet_aton("10.0.0.5") + struct.pack(">I", 40_000)
STORE_HOST = socket.inet_aton("127.0.0.1") + struct.pack(">I", 8081)  # EngineConfig's default
NOW = 1_700_000_000_000
TOPIC = "Codec"
QUEUES = 4
RETRY = "%RETRY%G"
LEVELS = DelayLevels.default()

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
"""Any Unicode text that encodes (P1: no lone surrogates)."""
_KEY = st.text(st.characters(exclude_categories=("Cs", "Zs", "Cc", "Zl", "Zp")), min_size=1,
               max_size=8)
_NAME = _TEXT.filter(lambda n: n != "" and n not in P.RESERVED)


@st.composite
def messages(draw: st.DrawFn, topic: str) -> dict[str, Any]:
    """One produce message (its JSON object), any shape ``POST /messages`` takes."""
    msg: dict[str, Any] = {}
    if draw(st.booleans()):
        msg["body"] = draw(_TEXT)
    else:
        msg["bodyBase64"] = base64.b64encode(draw(st.binary(max_size=40))).decode()
    if draw(st.booleans()):
        msg["tags"] = draw(_TEXT)
    keys = draw(st.none() | _TEXT | st.lists(_KEY, max_size=3))
    if keys is not None:
        msg["keys"] = keys
    props = draw(st.dictionaries(_NAME, _TEXT, max_size=3))
    if draw(st.booleans()):
        props[P.UNIQ_KEY] = draw(_KEY | st.just(""))  # "": the store gives one
    if topic == RETRY:  # R10: at the group's max (16) or past, or below it
        props[P.RECONSUME_TIME] = str(draw(st.integers(14, 18)))
        props[P.MAX_RECONSUME_TIMES] = draw(st.sampled_from(["16", "-1", "15"]))
    if props:
        msg["properties"] = props
    queues = QUEUES if topic == TOPIC else 1
    when = draw(st.sampled_from(["now", "level", "deliverAt", "delayMs"]))
    if when == "level":
        msg["delayLevel"] = draw(st.integers(0, LEVELS.max_level + 3))
    elif when == "deliverAt":
        msg["deliverAt"] = NOW + draw(st.integers(-10_000, 10**9))
    elif when == "delayMs":
        msg["delayMs"] = draw(st.integers(0, 10**9))
    if when != "now" or draw(st.booleans()):  # parked messages name their queue: REAL_QID
        msg["queueId"] = draw(st.integers(0, queues - 1))
    if draw(st.booleans()):
        msg["flag"] = draw(st.integers(-2**31, 2**31 - 1))
    if draw(st.booleans()):
        msg["bornTimestamp"] = draw(st.integers(0, 2**63 - 1))
    return msg


def reference_properties(props: dict[str, str]) -> bytes:
    """u16 name length | name | u32 value length | value, in order (UTF-8)."""
    out = b""
    for name, value in props.items():
        n, v = name.encode(), value.encode()
        out += struct.pack(">H", len(n)) + n + struct.pack(">I", len(v)) + v
    return out


def handover_properties(props: dict[str, str], level: int, queue_offset: int,
                        deliver_ts: int) -> dict[str, str]:
    """SPEC D4 (and T2) on a properties dict, the reference: DELAY, DELIVER_AT and DELAY_MS
    out; SCHEDULE_OFFSET ``<level>:<queue offset>`` then DELIVER_TS set (in place when
    present, else appended)."""
    for name in (P.DELAY, P.DELIVER_AT, P.DELAY_MS):
        props.pop(name, None)
    props[P.SCHEDULE_OFFSET] = f"{level}:{queue_offset}"
    props[P.DELIVER_TS] = str(deliver_ts)
    return props


def reference(msg: dict[str, Any], topic: str, result: PutResult) -> tuple[str, int, int,
                                                                            dict[str, str], int]:
    """(stored topic, queue id, reconsume times, properties, ConsumeQueue code) the SPEC
    gives for a message sent to ``topic`` and stored at ``result``."""
    props = dict(msg.get("properties", {}))
    if not props.get(P.UNIQ_KEY):  # the store gives one
        props[P.UNIQ_KEY] = result.msg_id
    if msg.get("tags"):
        props[P.TAGS] = msg["tags"]
    keys = msg.get("keys")
    keys = " ".join(keys) if isinstance(keys, list) else keys
    if keys:
        props[P.KEYS] = keys
    level = min(msg.get("delayLevel", 0), LEVELS.max_level)
    timer = "deliverAt" in msg or "delayMs" in msg
    reconsume = 0
    code = zlib.crc32(props[P.TAGS].encode()) if P.TAGS in props else 0  # S2
    if topic == RETRY:
        reconsume = int(props[P.RECONSUME_TIME])
        asked = int(props[P.MAX_RECONSUME_TIMES])
        if reconsume >= (16 if asked == -1 else asked) and not level and not timer:  # R10
            props[P.DLQ_REASON] = "max_reconsume_times"
            return "%DLQ%G", 0, reconsume, props, code
    queue_id = msg.get("queueId", result.queue_id)
    store_ts = result.store_timestamp
    if timer:  # T1
        props[P.REAL_TOPIC], props[P.REAL_QID] = topic, str(queue_id)
        if "deliverAt" in msg:
            props[P.DELIVER_AT] = str(msg["deliverAt"])
            return (naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE, reconsume, props,
                    max(msg["deliverAt"], store_ts))
        props[P.DELAY_MS] = str(msg["delayMs"])
        return (naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE, reconsume, props,
                store_ts + msg["delayMs"])
    if level:  # S1, S2: the deliver time
        props[P.REAL_TOPIC], props[P.REAL_QID] = topic, str(queue_id)
        props[P.DELAY] = str(level)
        return (naming.SCHEDULE_TOPIC, level - 1, reconsume, props,
                store_ts + LEVELS.delay_ms(level))
    return topic, queue_id, reconsume, props, code


def reference_record(msg: dict[str, Any], body: bytes, stored_topic: str, queue_id: int,
                     reconsume: int, props: dict[str, str], result: PutResult) -> bytes:
    """The CommitLog record (clepsydra_core.records' layout), written out field by field."""
    topic = stored_topic.encode()
    block = reference_properties(props)
    size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 4 + len(body) + 1 + len(topic) \
        + 4 + len(block)
    return (struct.pack(">i", size) + struct.pack(">i", 0x434C5331)
            + struct.pack(">I", zlib.crc32(body)) + struct.pack(">i", queue_id)
            + struct.pack(">i", msg.get("flag", 0)) + struct.pack(">q", result.queue_offset)
            + struct.pack(">q", result.commitlog_offset) + struct.pack(">i", 0)
            + struct.pack(">q", msg.get("bornTimestamp", NOW)) + BORN_HOST
            + struct.pack(">q", result.store_timestamp) + STORE_HOST
            + struct.pack(">i", reconsume) + struct.pack(">i", len(body)) + body
            + bytes([len(topic)]) + topic + struct.pack(">i", len(block)) + block)


def body_of(msg: dict[str, Any]) -> bytes:
    return msg["body"].encode() if "body" in msg else base64.b64decode(msg["bodyBase64"])


def refusals_only(refuse: Callable[..., Any]) -> Callable[..., Any]:
    """``Preparer.refuse`` as the produce encoder may use it: only to name a refusal."""
    def explain(*args: Any, **kwargs: Any) -> Any:
        refuse(*args, **kwargs)
        raise AssertionError(f"Preparer.refuse passed a request the encoder refused: {args[0]}")
    return explain


def entries(store: MessageStore, placed: list[tuple[str, int, PutResult]]) -> list[Any]:
    return [store._dispatcher.queue(t, q).entry(r.queue_offset) for t, q, r in placed]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from([TOPIC, RETRY]).flatmap(
    lambda topic: st.tuples(st.just(topic), st.lists(messages(topic), min_size=1, max_size=6))))
def test_produce_round_trips_every_field_and_equals_the_reference_bytes(
        case: tuple[str, list[dict[str, Any]]]) -> None:
    """Produce -> codec -> writer -> CommitLog -> indexes, then read back."""
    topic, batch = case
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        store = MessageStore(engine_config(data_dir))
        store._preparer.refuse = refusals_only(  # type: ignore[method-assign]
            store._preparer.refuse)
        try:
            store.create_topic(TOPIC, QUEUES)
            requests = parse_messages(batch, topic, 4 * 1024 * 1024, BORN_HOST, NOW, {})
            results = store.put_batch(requests)
            placed: list[tuple[str, int, PutResult]] = []
            for msg, result in zip(batch, results, strict=True):
                body = body_of(msg)
                stored_topic, queue_id, reconsume, props, code = reference(msg, topic, result)
                assert (result.topic, result.queue_id) == (stored_topic, queue_id), msg
                want = reference_record(msg, body, stored_topic, queue_id, reconsume, props,
                                        result)
                assert result.size == len(want)
                assert store._commitlog.read_bytes(result.commitlog_offset,
                                                   result.size) == want, msg
                record = store.get_by_commitlog_offset(result.commitlog_offset)
                assert (record.topic, record.queue_id, record.body, record.properties,
                        record.flag, record.reconsume_times) == (
                    stored_topic, queue_id, body, props, msg.get("flag", 0), reconsume)
                assert record.msg_id == result.msg_id == props[P.UNIQ_KEY]
                assert record in store.get_by_msg_id(result.msg_id)
                for key in props.get(P.KEYS, "").split():
                    assert record in store.get_by_key(stored_topic, key, 1000), key
                placed.append((stored_topic, queue_id, result))
                assert store._dispatcher.queue(stored_topic, queue_id).entry(
                    result.queue_offset) == QueueEntry(result.commitlog_offset, result.size,
                                                       code), msg
            live = entries(store, placed)
        finally:
            store.close()
        # P3: recovery walks the CommitLog again and places the same entries
        shutil.rmtree(data_dir / "consumequeue")
        for checkpoint in data_dir.rglob("checkpoint*"):
            checkpoint.unlink()
        store = MessageStore(engine_config(data_dir))
        try:
            assert entries(store, placed) == live
        finally:
            store.close()


_PROPERTY_NAMES = st.sampled_from([P.DELAY, P.DELIVER_AT, P.DELAY_MS, P.SCHEDULE_OFFSET,
                                   P.DELIVER_TS, P.REAL_TOPIC, P.REAL_QID, P.TAGS, P.KEYS,
                                   P.UNIQ_KEY, P.TRACEPARENT]) | _NAME


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_PROPERTY_NAMES, _TEXT, max_size=8), st.integers(0, 18),
       st.integers(0, 2**40), st.integers(0, 2**45))
def test_the_splice_gives_the_bytes_of_the_dict_rebuild(props: dict[str, str], level: int,
                                                         queue_offset: int,
                                                         deliver_ts: int) -> None:
    """D4: the hand-over's splice of a stored block equals its dict rebuild."""
    template = splice_template(reference_properties(props))
    assert template is not None
    rebuilt = handover_properties(dict(props), level, queue_offset, deliver_ts)
    assert b"".join(splice_properties(template, level, queue_offset, deliver_ts)) == \
        reference_properties(rebuilt)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=8, max_size=8), st.integers(0, 2**63 - 1))
def test_the_writer_offset_msg_id_is_the_msgid_module_encoding(host: bytes, offset: int) -> None:
    """The offsetMsgId the writer builds (records.offset_msg_id, one per record under the lock)
    is the msgId layout of clepsydra_core.msgid: store host then the offset, 32 hex digits."""
    assert offset_msg_id(host.hex().upper(), offset) == encode_msg_id(host, offset)
    assert decode_msg_id(offset_msg_id(host.hex().upper(), offset)).commitlog_offset == offset


# ---- every other writer: copies, tombstones, the D7 park, timers, hand-over, carry-forward ----
STORE_SRC = Path(__file__).resolve().parents[3] / "services" / "store" / "src" / "clepsydra_store"
LAYOUT_WRITERS = ("VALUE_LEN.pack", "NAME_LEN.pack", "I32.pack", "U8.pack", "RECORD_HEADER.pack",
                  "encode_record", "encode_properties", "P.property_field", "pack_header(")
"""What writes a piece of a record's bytes: the property and tail layouts, the header."""


def test_record_bytes_are_written_by_the_codec_alone() -> None:
    """One encoder. The properties layout and the record tail are written in
    engine/write/codec.py only (``property_field``, ``encode_tail``), the header by
    ``records.pack_header`` in the writer (``Writer._place``) and the codec
    (``relocated_header``): no other module of the store writes a second copy of them."""
    allowed = {"engine/write/codec.py": set(LAYOUT_WRITERS),
               "engine/write/writer.py": {"pack_header("}}
    found = []
    for path in sorted(STORE_SRC.rglob("*.py")):
        name = path.relative_to(STORE_SRC).as_posix()
        text = path.read_text()
        found += [(name, token) for token in LAYOUT_WRITERS
                  if token in text and token not in allowed.get(name, set())]
    assert found == []


def stored(store: MessageStore, commitlog_offset: int) -> tuple[bytes, CommitLogRecord]:
    """The stored bytes of the record at ``commitlog_offset``, and the record they decode to."""
    (size,) = struct.unpack(">i", store._commitlog.read_bytes(commitlog_offset, 4))
    raw = store._commitlog.read_bytes(commitlog_offset, size)
    return raw, decode_record(raw)[0]


def assert_reference(store: MessageStore, commitlog_offset: int, topic: str, queue_id: int,
                     props: dict[str, str]) -> CommitLogRecord:
    """The record at ``commitlog_offset`` is in ``topic``/``queue_id`` with exactly ``props`` in
    that order, and its bytes are the reference layout of its fields (clepsydra_core.records,
    written out field by field)."""
    raw, r = stored(store, commitlog_offset)
    assert (r.topic, r.queue_id) == (topic, queue_id)
    assert list(r.properties.items()) == list(props.items())
    name = topic.encode()
    block = reference_properties(props)
    size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 4 + len(r.body) + 1 + len(name) \
        + 4 + len(block)
    assert raw == (struct.pack(">iiIiiqqiq", size, 0x434C5331, zlib.crc32(r.body), queue_id,
                               r.flag, r.queue_offset, commitlog_offset, r.sys_flag,
                               r.born_timestamp) + r.born_host
                   + struct.pack(">q", r.store_timestamp) + STORE_HOST
                   + struct.pack(">ii", r.reconsume_times, len(r.body)) + r.body
                   + bytes([len(name)]) + name + struct.pack(">i", len(block)) + block)
    return r


def test_every_record_the_store_writes_has_the_reference_bytes(open_store: OpenStore) -> None:
    """Copies (R-ladder), the level park and hand-over (S1, D4 splice, D7 park),
    timers (T1: park, tombstone, reschedule, hand-over through the dict rebuild) are all
    encoded as the SPEC's layout with the properties the rules give, in order."""
    store = open_store(levels="1s 2s 3s")
    store.create_topic(TOPIC, 2)
    store.create_topic("Gone", 1)
    plain = store.put(PutRequest(TOPIC, b"p", tags="a", keys="k1 k2", queue_id=0,
                                 properties={"app": "x", P.UNIQ_KEY: "U-plain"}))
    base = {"app": "x", P.UNIQ_KEY: "U-plain", P.TAGS: "a", P.KEYS: "k1 k2"}
    assert_reference(store, plain.commitlog_offset, TOPIC, 0, base)

    copy = store.copy([CopyRequest(commitlog_offset=plain.commitlog_offset, topic=RETRY,
                                reconsume_times=1, set_properties={P.RETRY_TOPIC: TOPIC})])[0]
    copied = assert_reference(store, copy.commitlog_offset, RETRY, 0,
                              {**base, P.RETRY_TOPIC: TOPIC})
    assert copied.reconsume_times == 1

    level = store.put(PutRequest(TOPIC, b"l", tags="a", queue_id=1, delay_level=1,
                                 properties={P.UNIQ_KEY: "U-level"}))
    gone = store.put(PutRequest("Gone", b"g", delay_level=1, queue_id=0,
                                properties={P.UNIQ_KEY: "U-gone"}))
    parked = {P.UNIQ_KEY: "U-level", P.TAGS: "a", P.REAL_TOPIC: TOPIC, P.REAL_QID: "1",
              P.DELAY: "1"}
    assert_reference(store, level.commitlog_offset, naming.SCHEDULE_TOPIC, 0, parked)
    store.delete_topic("Gone")
    assert store.handover(1, 0, 10, now_ms=gone.store_timestamp + 1_000).delivered == 1
    delivered = store.get_by_msg_id("U-level")[-1]
    assert_reference(store, delivered.commitlog_offset, TOPIC, 1, {
        P.UNIQ_KEY: "U-level", P.TAGS: "a", P.REAL_TOPIC: TOPIC, P.REAL_QID: "1",
        P.SCHEDULE_OFFSET: "1:0", P.DELIVER_TS: str(level.store_timestamp + 1_000)})
    error = store.get_by_msg_id("U-gone")[-1]
    assert_reference(store, error.commitlog_offset, naming.SCHEDULE_ERROR_TOPIC, 0, {
        P.UNIQ_KEY: "U-gone", P.REAL_TOPIC: "Gone", P.REAL_QID: "0",
        P.SCHEDULE_OFFSET: "1:1", P.DELIVER_TS: str(gone.store_timestamp + 1_000),
        P.SCHEDULE_ERROR: "real_topic_missing: Gone"})

    far = NOW + 10**9
    timer = store.put(PutRequest(TOPIC, b"t", deliver_at=far, queue_id=0,
                                 properties={P.UNIQ_KEY: "U-timer"}))
    assert_reference(store, timer.commitlog_offset, naming.TIMER_TOPIC, 0, {
        P.UNIQ_KEY: "U-timer", P.REAL_TOPIC: TOPIC, P.REAL_QID: "0", P.DELIVER_AT: str(far)})
    store._timers.reschedule("U-timer", NOW)
    tombstone = store._dispatcher.queue(naming.TIMER_TOPIC, naming.TIMER_CANCEL_QUEUE).entry(0)
    assert tombstone is not None
    assert_reference(store, tombstone.commitlog_offset, naming.TIMER_TOPIC,
                     naming.TIMER_CANCEL_QUEUE,
                     {P.CANCEL_OF: "0:0", P.ORIGIN_MESSAGE_ID: "U-timer"})
    again = store.get_by_msg_id("U-timer")[-1]
    assert_reference(store, again.commitlog_offset, naming.TIMER_TOPIC, 0, {
        P.UNIQ_KEY: "U-timer", P.REAL_TOPIC: TOPIC, P.REAL_QID: "0", P.DELIVER_AT: str(NOW)})
    assert store._timers.handover(again.store_timestamp, 10).delivered == 1
    handed = store.get_by_msg_id("U-timer")[-1]
    assert_reference(store, handed.commitlog_offset, TOPIC, 0, {
        P.UNIQ_KEY: "U-timer", P.REAL_TOPIC: TOPIC, P.REAL_QID: "0", P.SCHEDULE_OFFSET: "0:1",
        P.DELIVER_TS: str(again.store_timestamp)})


def test_a_carried_record_is_the_stored_one_placed_by_dispatch(open_store: OpenStore) -> None:
    """SPEC P4: carry-forward writes the parked record byte for byte but its own
    CommitLog offset, and its entry and keys are placed as a live append's (dispatch)."""
    store = open_store(levels="1s 2s 3s")
    store.create_topic(TOPIC, 1)
    parked = store.put(PutRequest(TOPIC, b"later", keys="k-later", delay_level=3,
                                  properties={P.UNIQ_KEY: "U-later"}))
    old, _ = stored(store, parked.commitlog_offset)
    for _ in range(3):  # past a few 64 KiB segments
        store.put_batch([PutRequest(TOPIC, b"f" * 1000) for _ in range(70)])
    assert store.delete_expired_segments(now_ms=NOW + 10**12) >= 1
    assert store.stats()["schedule_carried_total"] == 1
    entry = store._dispatcher.queue(naming.SCHEDULE_TOPIC, 2).entry(parked.queue_offset)
    assert entry is not None and entry.commitlog_offset > parked.commitlog_offset
    assert entry == QueueEntry(entry.commitlog_offset, len(old), parked.store_timestamp + 3_000)
    new, _ = stored(store, entry.commitlog_offset)
    assert new == old[:28] + struct.pack(">q", entry.commitlog_offset) + old[36:]
    assert [r.commitlog_offset for r in store.get_by_msg_id("U-later")] == [
        entry.commitlog_offset]
