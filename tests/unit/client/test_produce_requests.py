"""The requests the SDK's producer writes, read by a real HTTP/1.1 server on loopback
(the per-call work of ``Producer.send`` and ``send_async`` was cut; what goes on the wire is
what it was): the message's trace context is the request's, made once; a batch answer that is
not what the store answers fails its futures with the store's error, not a crash."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from opentelemetry import trace

from clepsydra_client import Producer
from clepsydra_core import properties as P
from clepsydra_core.errors import RemoteError
from tests.unit.core.test_http_connections import Exchange, Handler, Server, serve

__all__ = ["serve"]  # the fixture

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
