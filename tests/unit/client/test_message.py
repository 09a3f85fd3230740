"""The Message view of the v1 JSON, and what the producer puts on the wire."""

from __future__ import annotations

import base64
import threading
import time
from typing import TYPE_CHECKING

import pytest
from opentelemetry import trace

from clepsydra_client.ids import new_client_id, new_uniq_key
from clepsydra_client.message import Attempt, Message, SendResult, append_failure
from clepsydra_client.producer import OutgoingMessage, message_request
from clepsydra_client.settings import ensure_tracing
from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.msgid import pack_host
from clepsydra_core.records import CommitLogRecord, message_to_json
from clepsydra_core.wire.produce import ProduceAnswer, ProduceBatch, ProduceMessage

if TYPE_CHECKING:

    pass

def test_message_reads_every_field_of_the_v1_view() -> None:
    record = CommitLogRecord(
        topic="orders", body=b"\xff\x00binary", queue_id=2, flag=5,
        properties={P.TAGS: "paid", P.KEYS: "k1 k2", P.UNIQ_KEY: "U",
                    P.FAILURE_HISTORY: '[{"time": 5, "consumer": "c", "reason": "r", '
                                       '"reconsumeTimes": 0}]'},
        queue_offset=7, commitlog_offset=4096, born_timestamp=10,
        born_host=pack_host("10.0.0.1:5"), store_timestamp=11,
        store_host=pack_host("127.0.0.1:8081"), reconsume_times=1, sys_flag=2)
    m = Message.from_json(message_to_json(record))
    assert (m.msg_id, m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) == (
        record.msg_id, "orders", 2, 7, 4096)
    assert m.body == b"\xff\x00binary" and m.tags == "paid" and m.keys == ("k1", "k2")
    assert (m.flag, m.reconsume_times, m.sys_flag) == (5, 1, 2)
    assert (m.born_host, m.store_host) == ("10.0.0.1:5", "127.0.0.1:8081")
    assert m.uniq_key == "U"
    assert m.failure_history == [Attempt(5, "c", "r", 0)]
    assert Message.from_json(m.to_json()) == m


def test_append_failure_keeps_the_newest() -> None:
    raw = None
    for i in range(40):
        raw = append_failure(raw, Attempt(i, "c", f"r{i}"))
    history = Message(msg_id="x", topic="t", body=b"",
                      properties={P.FAILURE_HISTORY: raw or ""}).failure_history
    assert len(history) == 32 and history[-1].reason == "r39"


def test_uniq_keys_are_unique_32_hex() -> None:
    keys = {new_uniq_key() for _ in range(5000)}
    assert len(keys) == 5000
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)


def test_uniq_keys_from_many_threads_are_unique_and_carry_the_time() -> None:
    """Ids are made without a lock (one ``itertools.count`` step each, the prefix
    and time text made once a millisecond): eight threads at once still get distinct ids, and
    each id's time digits are the millisecond it was made in."""
    made: list[list[tuple[int, str, int]]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def make(out: list[tuple[int, str, int]]) -> None:
        start.wait()
        for _ in range(5000):
            before = time.time_ns() // 1_000_000
            key = new_uniq_key()
            out.append((before, key, time.time_ns() // 1_000_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [entry for out in made for entry in out]
    assert len({key for _, key, _ in everything}) == 8 * 5000
    assert all(before <= int(key[12:24], 16) <= after for before, key, after in everything)


def test_client_ids_differ_within_a_process() -> None:
    assert new_client_id() != new_client_id()
    assert new_client_id("billing").endswith("@billing")


def test_produce_request_carries_uniq_key_and_trace_context() -> None:  # SPEC O1
    ensure_tracing("none")
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("parent") as span:
        req = message_request(OutgoingMessage("hi", tags="t", keys=["a", "b"],
                                              properties={"x": "y"}, delay_level=2), "UK")
        trace_id = f"{span.get_span_context().trace_id:032x}"
    assert req["body"] == "hi" and req["tags"] == "t" and req["keys"] == "a b"
    assert req["delayLevel"] == 2
    assert req["properties"][P.UNIQ_KEY] == "UK" and req["properties"]["x"] == "y"
    assert req["properties"][P.TRACEPARENT].split("-")[1] == trace_id


def test_binary_bodies_travel_base64() -> None:
    req = message_request(OutgoingMessage(b"\xff\xfe"), "UK")
    assert req == {"bodyBase64": base64.b64encode(b"\xff\xfe").decode(),
                   "properties": {P.UNIQ_KEY: "UK"}}


def test_negative_delay_level_is_refused_before_sending() -> None:  # SPEC L2
    with pytest.raises(ValidationError, match="delay level"):
        message_request(OutgoingMessage("x", delay_level=-1), "UK")


def test_keys_with_spaces_are_refused() -> None:
    with pytest.raises(ValidationError, match="without spaces"):
        message_request(OutgoingMessage("x", keys=["a b"]), "UK")


@pytest.mark.parametrize("message", [
    OutgoingMessage("hi", tags="t", keys=["a", "b"], properties={"x": "y"}, delay_level=2),
    OutgoingMessage(b"\xff\xfe", queue_id=3, delay=1500),
    OutgoingMessage("later", keys="k", deliver_at=4_102_444_800_000),
])
def test_produce_request_is_the_wire_types_json(message: OutgoingMessage) -> None:
    """The SDK's produce body is a ProduceMessage's JSON, not a dict of its own:
    the store's wire type reads it back (strictly) to the same JSON."""
    req = message_request(message, "UK")
    read = ProduceMessage.from_json(req, strict=True)
    assert read.to_json() == req
    batch = ProduceBatch.of_json([req])
    assert ProduceBatch.from_json(batch, strict=True).to_json() == batch


def test_send_result_reads_every_field_of_the_wire_answer() -> None:
    # the SDK reads the produce answer by the wire type's JSON names
    answer = ProduceAnswer(msg_id="M", topic="T", queue_id=3, queue_offset=7,
                           commitlog_offset=1234, store_timestamp=99, offset_msg_id="O",
                           deliver_at=4321)
    result = SendResult.from_json(answer.to_json(), "U")
    assert (result.msg_id, result.topic, result.queue_id, result.queue_offset,
            result.commitlog_offset, result.store_timestamp, result.offset_msg_id,
            result.deliver_at, result.uniq_key) == ("M", "T", 3, 7, 1234, 99, "O", 4321, "U")


def test_message_from_json_is_the_wire_types_reading_of_drawn_views() -> None:
    # DEC-pull-json-view: Message.from_json reads the view field by field, by position; it
    # equals the reading through the wire type (StoredMessage) on drawn records' views
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from clepsydra_core.records import decode_view, encode_record
    from clepsydra_core.wire.messages import StoredMessage
    from tests.unit.core.test_record_view import records

    @settings(max_examples=200, deadline=None)
    @given(records(), st.booleans())
    def check(record: CommitLogRecord, with_body: bool) -> None:
        view, _ = decode_view(encode_record(record), 0, with_body)
        assert Message.from_json(view) == Message.of(StoredMessage.from_json(view))

    check()
