"""The bytes ``Producer.send`` writes, drawn messages read by a real HTTP/1.1 server on loopback
(DEC-sdk-send-path cut the HTTP client's layers under the send; what goes on the wire is what
it was): the request head field by field in its order (the token's, ``Content-Type``, the
trace context, ``Content-Length``) and the body as the frozen ``ProduceMessage``'s own JSON."""

from __future__ import annotations

import base64
from collections.abc import Callable

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clepsydra_client import Producer
from clepsydra_core import properties as P
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.produce import ProduceMessage
from tests.unit.core.test_http_connections import Exchange, Handler, Server, serve

__all__ = ["serve"]  # the fixture

ANSWER = orjson.dumps({"msgId": "M", "topic": "t", "queueId": 0, "queueOffset": 1,
                       "commitLogOffset": 2, "storeTimestamp": 3, "offsetMsgId": "O"})
_WORD = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1,
               max_size=12).filter(lambda w: w.split() == [w])
_NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10).map("app_".__add__)
"""An application's property name (none of the reserved ones: they are upper case, or the
trace context's)."""


def _answer(ex: Exchange) -> bool:
    return ex.json(201, ANSWER)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["t", "orders", "a b/ü"]),
       body=st.one_of(st.text(max_size=40), st.binary(max_size=40)),
       tags=st.one_of(st.none(), _WORD), keys=st.lists(_WORD, max_size=3),
       properties=st.dictionaries(_NAME, st.text(max_size=10), max_size=3),
       delay_level=st.integers(0, 18), token=st.sampled_from([None, "tok-1"]))
def test_a_sends_request_bytes_are_the_messages_wire_form(
        serve: Callable[[Handler], Server], topic: str, body: bytes | str,
        tags: str | None, keys: list[str], properties: dict[str, str], delay_level: int,
        token: str | None) -> None:
    """SPEC O1 (the request's ``traceparent`` is the message's) and the produce wire format:
    the head of every drawn send is exactly the one built here by hand, the body exactly
    ``ProduceMessage(...).to_json()`` of the message (not ``json_of``'s fast encoding)."""
    server = serve(_answer)
    with Producer(server.url, token=token) as producer:
        producer.send(topic, body, tags=tags, keys=keys, properties=properties,
                      delay_level=delay_level)
        path = producer.http.path("/v1/topics/{}/messages", topic)
    (ex,) = server.requests
    sent = orjson.loads(ex.body)["properties"]
    traceparent = sent[P.TRACEPARENT]
    assert list(sent) == [*properties, P.UNIQ_KEY, P.TRACEPARENT]
    text: str | None = body if isinstance(body, str) else None
    encoded: str | None = None
    if isinstance(body, bytes):
        try:
            text = body.decode()
        except UnicodeDecodeError:
            encoded = base64.b64encode(body).decode()
    expected_body = orjson.dumps(ProduceMessage(
        body=text, body_base64=encoded, tags=tags or None, keys=" ".join(keys) or None,
        properties={**properties, P.UNIQ_KEY: sent[P.UNIQ_KEY], P.TRACEPARENT: traceparent},
        delay_level=delay_level or None).to_json())
    assert ex.body == expected_body
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    host = server.url.removeprefix("http://")
    assert ex.head == (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}"
                       f"Content-Type: application/json\r\ntraceparent: {traceparent}\r\n"
                       f"Content-Length: {len(expected_body)}")


def test_another_shards_client_sends_the_token_first(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-store-shards: the client of another shard (``HttpClient.sibling``) sends its
    bootstrap client's token, in the first header field as the bootstrap's does (the fields
    every call starts with are made when the token is set, DEC-sdk-send-path)."""
    server = serve(_answer)
    bootstrap = HttpClient("http://127.0.0.1:9", token="tok-2")
    twin = bootstrap.sibling(server.url, "store shard 1")
    try:
        twin.post("/v1/topics/t/messages", {"body": "x"})
        twin.get("/v1/topics")
    finally:
        twin.close()
        bootstrap.close()
    for ex in server.requests:
        assert ex.head.split("\r\n")[2] == "Authorization: Bearer tok-2"
    assert server.requests[0].header("content-type") == "application/json"
    assert server.requests[1].header("content-type") is None  # no body, no Content-Type
