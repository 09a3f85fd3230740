"""The requests the SDK's producer writes, read by a real HTTP/1.1 server on loopback
(the per-call work of ``Producer.send`` and ``send_async`` was cut; what goes on the wire is
what it was): the message's trace context is the request's, made once; a batch answer that is
not what the store answers fails its futures with the store's error, not a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import orjson
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clepsydra_client import Producer, SendResult
from clepsydra_core import properties as P
from clepsydra_core.errors import RemoteError
from clepsydra_core.runtime import telemetry
from tests.integration.client.test_producer_sampling import half_sampled
from tests.unit.core.test_http_connections import Exchange, Handler, Server, serve

__all__ = ["half_sampled", "serve"]  # the fixtures

ANSWER = {"msgId": "M", "topic": "t", "queueId": 0, "queueOffset": 1, "commitLogOffset": 2,
          "storeTimestamp": 3, "offsetMsgId": "O"}


def _answer(ex: Exchange) -> bool:
    if ex.target.endswith("/batch"):
        count = len(orjson.loads(ex.body)["messages"])
        return ex.json(201, orjson.dumps({"results": [ANSWER] * count}))
    return ex.json(201, orjson.dumps(ANSWER))


def test_a_sent_message_and_its_request_carry_one_trace_context(
        serve: Callable[[Handler], Server]) -> None:
    """SPEC O1: the request's ``traceparent`` header is the message's (the header is
    no longer made a second time), with no current span, inside the application's span, and
    when the message brings its own (then the request carries the current span's)."""
    server = serve(_answer)
    producer = Producer(server.url)
    try:
        producer.send("t", "one", keys=["k1"])
        with trace.get_tracer("test").start_as_current_span("app"):
            producer.send("t", "two")
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        producer.send("t", "three", properties={P.TRACEPARENT: own})
    finally:
        producer.close()
    for ex in server.requests[:2]:
        props = orjson.loads(ex.body)["properties"]
        assert props[P.UNIQ_KEY] and props[P.TRACEPARENT] == ex.header("traceparent")
    third = server.requests[2]
    assert orjson.loads(third.body)["properties"][P.TRACEPARENT] == own
    assert third.header("traceparent") not in (None, own)  # the current (SDK's) span's


def test_send_results_keep_their_unique_keys(serve: Callable[[Handler], Server]) -> None:
    """Each future's result carries its own message's ``UNIQ_KEY`` (kept by the future, the
    store's answer kept as decoded)."""
    server = serve(_answer)
    producer = Producer(server.url)
    try:
        futures = [producer.send_async("t", f"m{i}") for i in range(5)]
        producer.flush()
    finally:
        producer.close()
    sent = [p[P.UNIQ_KEY] for ex in server.requests
            for p in (m["properties"] for m in orjson.loads(ex.body)["messages"])]
    assert [f.result().uniq_key for f in futures] == sent and len(set(sent)) == 5


def test_a_batch_answer_without_objects_fails_its_futures(
        serve: Callable[[Handler], Server]) -> None:
    """A batch answer whose results are not objects fails every future of the batch with
    RemoteError (the service's answer is not the store's), never a result that is not a
    ``SendResult``."""
    def odd(ex: Exchange) -> bool:
        count = len(orjson.loads(ex.body)["messages"])
        return ex.json(201, orjson.dumps({"results": ["x"] * count}))

    server = serve(odd)
    producer = Producer(server.url)
    try:
        futures = [producer.send_async("t", f"m{i}") for i in range(3)]
        producer.flush()
    finally:
        producer.close()
    for future in futures:
        with pytest.raises(RemoteError, match="not an object"):
            future.result()


def _carried(ex: Exchange) -> tuple[str, str, str]:
    """(trace id, span id, flags) of the ``traceparent`` a request's message carries, checked
    to be the request header's too."""
    carried = orjson.loads(ex.body)["properties"][P.TRACEPARENT]
    assert ex.header("traceparent") == carried
    version, trace_id, span_id, flags = carried.split("-")
    assert version == "00"
    return trace_id, span_id, flags


def test_each_single_send_carries_its_own_decision(
        serve: Callable[[Handler], Server], half_sampled: InMemorySpanExporter) -> None:
    """SPEC O1, DEC-sdk-send-path: a ``send`` without a current span starts a trace of its
    own, sampled or not (here about half); a sampled one is recorded as a ``client.produce``
    span whose context is the one its message and its request carry, naming the message; an
    unsampled one is no span at all, but its message and request still carry a
    ``traceparent`` (flags 00) that later hops follow."""
    server = serve(_answer)
    with Producer(server.url) as producer:
        results = [producer.send("t", f"m{i}") for i in range(60)]
    carried = [_carried(ex) for ex in server.requests]
    assert len({trace_id for trace_id, _, _ in carried}) == 60  # a trace each
    sampled = {(trace_id, span_id) for trace_id, span_id, flags in carried
               if int(flags, 16) & 1}
    assert 0 < len(sampled) < 60  # both kinds are there
    recorded = set()
    for span in half_sampled.get_finished_spans():
        assert span.name == "client.produce" and span.context and span.attributes
        assert span.parent is None and span.kind is trace.SpanKind.PRODUCER
        assert span.attributes[telemetry.MESSAGE_ID] == "M"
        assert span.attributes[telemetry.DESTINATION] == "t"
        recorded.add((f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"))
    assert recorded == sampled  # a span for, and only for, each sampled message
    assert all(r.msg_id == "M" and r.uniq_key for r in results)


def test_a_send_inside_a_span_continues_its_trace_sampled_or_not(
        serve: Callable[[Handler], Server], half_sampled: InMemorySpanExporter) -> None:
    """SPEC O1: inside the application's sampled span a send is its recorded child, and the
    message carries that child's context; inside an unsampled one (a remote parent with
    flags 00) no span is made, yet the message and its request carry a ``traceparent`` in the
    parent's trace, with a span id of its own and the parent's flags."""
    server = serve(_answer)
    sampled_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    unsampled_parent = "00-33333333333333333333333333333333-4444444444444444-00"
    with Producer(server.url) as producer:
        for parent in (sampled_parent, unsampled_parent):
            token = otel_context.attach(telemetry.remote_context(parent))
            try:
                producer.send("t", "inside", delay_level=2)
            finally:
                otel_context.detach(token)
    (trace_1, span_1, flags_1), (trace_2, span_2, flags_2) = map(_carried, server.requests)
    [span] = half_sampled.get_finished_spans()
    assert span.context and span.parent and span.attributes
    assert trace_1 == "0af7651916cd43dd8448eb211c80319c" and int(flags_1, 16) & 1
    assert (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}") == (trace_1, span_1)
    assert f"{span.parent.span_id:016x}" == "b7ad6b7169203331"
    assert span.attributes[telemetry.DELAY_LEVEL] == 2
    assert (trace_2, flags_2) == ("33333333333333333333333333333333", "00")
    assert span_2 not in ("4444444444444444", "0" * 16)


def test_a_send_result_is_the_frozen_value_of_the_answer(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-sdk-send-path: ``send``'s result (its slots filled without ``__init__``) is the
    same value the class builds: equal, hashable, frozen, ``dataclasses.replace`` works; an
    answer without ``offsetMsgId`` gives the msgId, a timer's ``deliverAt`` is kept."""
    answers = iter([ANSWER, {**ANSWER, "offsetMsgId": None, "deliverAt": 1234}])
    server = serve(lambda ex: ex.json(201, orjson.dumps(next(answers))))
    with Producer(server.url) as producer:
        first = producer.send("t", "a")
        second = producer.send("t", "b", delay=5000)
    assert first == SendResult("M", "t", 0, 1, 2, 3, first.uniq_key, "O", None)
    assert hash(first) == hash(dataclasses.replace(first))
    assert (second.offset_msg_id, second.deliver_at) == ("M", 1234)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.msg_id = "X"  # type: ignore[misc]
    assert first.uniq_key and second.uniq_key and first.uniq_key != second.uniq_key
