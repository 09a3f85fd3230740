"""Produce: the handlers of ``POST /v1/topics/{topic}/messages`` and ``.../messages/batch``,
framework-free (every way in answers them through ``envelope.py``: the Flask view, the lean
WSGI path, the worker's poller). The whole request is checked before anything is stored; a
batch with one bad message is refused as a whole, the error naming the message's index.

Checks here (the engine repeats the storage rules): the message's shape, types and ranges as
:class:`clepsydra_core.wire.produce.ProduceMessage` defines them (``body`` xor ``bodyBase64``,
valid base64, ``delayLevel`` >= 0 (L2), reserved properties (P1)), body size (P1), topic name
(P1), system topics (S3; `%RETRY%` plain sends allowed, R10 happens in the engine), at most
one of ``delayLevel``/``deliverAt``/``delayMs`` (SPEC T1; the engine checks the timer cap). The
common shape is read by
:func:`parse_plain` (the hot path, no validation objects); anything else by
:func:`parse_message` through the wire type, whose errors name the field.
"""

from __future__ import annotations

import base64
import binascii
import functools
import time
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from clepsydra_core import naming, validation
from clepsydra_core import properties as P
from clepsydra_core.errors import BodyTooLarge, ClepsydraError, ValidationError
from clepsydra_core.msgid import pack_host
from clepsydra_core.runtime import telemetry
from clepsydra_core.validation import properties_settable
from clepsydra_core.wire.produce import (
    MAX_BATCH,
    ProduceBatch,
    ProduceMessage,
)
from clepsydra_core.wire.timers import MAX_DELAY_MS, MAX_DELIVER_AT
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply
from clepsydra_store.api.observability import (
    BATCH_COUNT,
    DESTINATION,
    MESSAGE_ID,
)
from clepsydra_store.engine.types import PutRequest, PutResult, PutStatus
from clepsydra_web import jsonio
from clepsydra_web.tracing import plain_parent

STORED_TOPIC = telemetry.STORED_TOPIC
PLAIN_FIELDS = frozenset(ProduceMessage.json_names()) - {"bodyBase64"}
"""Fields of a message that :func:`parse_plain` takes; others go through parse_message."""
BATCH_FIELDS = frozenset(ProduceBatch.json_names())
_ALL_OK = frozenset({PutStatus.OK})
_STATUS = attrgetter("status")
_TOPIC = attrgetter("topic")
_SEND = {telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM, telemetry.OPERATION_TYPE: telemetry.SEND}
_BODY = attrgetter("body")
_TIMER_TOPIC = naming.TIMER_TOPIC


class FlushTimeout(ClepsydraError):
    """Sync flush: the messages were appended but the fsync did not complete in time, so
    they are not acknowledged (P2). The producer may resend (at-least-once)."""

    code = "FLUSH_TIMEOUT"
    http_status = 503

    def __init__(self, message: str, results: list[dict[str, Any]]) -> None:
        super().__init__(message, rule="P2")
        self.results = results

    def to_json(self) -> dict[str, Any]:  # type: ignore[override]
        return {**super().to_json(), "results": self.results}


def born_host(environ: Mapping[str, Any]) -> bytes:
    """The producer's address (bornHost) from the connection's remote address and port."""
    return _packed_host(environ.get("REMOTE_ADDR") or "0.0.0.0", environ.get("REMOTE_PORT") or 0)


@functools.lru_cache(maxsize=4096)
def _packed_host(address: str, port: str | int) -> bytes:
    """:func:`pack_host` of a connection's address, kept for the last 4,096 connections: a
    kept-alive producer sends from one (the parse was ~1 % of a single send's instructions,
    DEC-poller-group-append)."""
    return pack_host(f"{address}:{port}")


def decode_body(text: str | None, encoded: str | None, max_body_bytes: int) -> bytes:
    """The body of a message read by :class:`ProduceMessage` (exactly one of ``text``, UTF-8,
    and ``encoded``, valid base64, given); P1 size limit."""
    if encoded is not None:
        if len(encoded) > (max_body_bytes // 3 + 1) * 4 + 4:
            raise BodyTooLarge(f"body is more than {max_body_bytes} bytes", rule="P1")
        try:
            body = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationError(f"bodyBase64 is not valid base64: {exc}",
                                  code="INVALID_BASE64") from exc
    else:
        assert text is not None
        try:
            body = text.encode()
        except UnicodeEncodeError as exc:
            raise ValidationError("body is not valid Unicode text", rule="P1",
                                  code="INVALID_REQUEST") from exc
    return validation.validate_body(body, max_body_bytes)


def parse_keys(value: str | list[str] | None) -> str | None:
    """``keys``: space-separated text, or a list of key strings."""
    if isinstance(value, list):
        return validation.validate_text(" ".join(value), "keys") or None
    return validation.validate_text(value, "keys")


def parse_message(msg: object, topic: str, max_body_bytes: int, host: bytes,
                  now_ms: int, trace_props: Mapping[str, str]) -> PutRequest:
    """One message of a produce request as a PutRequest (nothing stored). ``trace_props`` is
    the request span's context (`traceparent`, ...), given to messages that carry none."""
    m = ProduceMessage.from_json(msg, what="message", strict=True)
    body = decode_body(m.body, m.body_base64, max_body_bytes)
    props = dict(validation.validate_properties(m.properties)) if m.properties else {}
    if P.TRACEPARENT not in props:
        props.update(trace_props)
    return PutRequest(
        topic=topic,
        body=body,
        tags=validation.validate_text(m.tags, "tags"),
        keys=parse_keys(m.keys),
        properties=props,
        queue_id=m.queue_id,
        delay_level=m.delay_level or 0,
        flag=m.flag or 0,
        born_timestamp=now_ms if m.born_timestamp is None else m.born_timestamp,
        born_host=host,
        deliver_at=m.deliver_at,
        delay_ms=m.delay_ms,
    )


def parse_plain(msg: object, topic: str, max_body_bytes: int, host: bytes, now_ms: int,
                trace_props: dict[str, str]) -> PutRequest | None:
    """:func:`parse_message` of the common shape (text body; tags, keys as text, properties,
    integers all plain and valid), in fewer steps; None when the message is anything else
    (parse_message then answers for it, errors included). A message without properties gets
    ``trace_props`` itself (the engine never changes a request's properties)."""
    if type(msg) is not dict or not msg.keys() <= PLAIN_FIELDS:
        return None
    get = msg.get
    text = get("body")
    if type(text) is not str:
        return None
    try:
        body = text.encode()
    except UnicodeEncodeError:
        return None
    if len(body) > max_body_bytes:
        return None
    present = 1
    props = trace_props
    raw_props = get("properties")
    if raw_props is not None:
        if type(raw_props) is not dict or not properties_settable(raw_props):
            return None
        props = dict(raw_props)
        if P.TRACEPARENT not in props:
            props.update(trace_props)
        present += 1
    tags = get("tags")
    if tags is not None:
        if type(tags) is not str or not (tags.isascii() or _encodes(tags)):
            return None
        present += 1
    keys = get("keys")
    if keys is not None:
        if type(keys) is not str or not (keys.isascii() or _encodes(keys)):
            return None
        present += 1
    if present == len(msg):  # nothing else given
        return PutRequest(topic, body, tags, keys, props, None, 0, 0, now_ms, host)
    deliver_at = get("deliverAt")
    delay_ms = get("delayMs")
    if deliver_at is not None or delay_ms is not None:  # SPEC T1: send(delay=), (deliver_at=)
        if (deliver_at is not None) + (delay_ms is not None) + (get("delayLevel") is not None) > 1:
            return None  # more than one way of being delayed: parse_message names the rule
        if deliver_at is not None:
            if type(deliver_at) is not int or not 0 <= deliver_at <= MAX_DELIVER_AT:
                return None
        elif type(delay_ms) is not int or not 0 <= delay_ms <= MAX_DELAY_MS:
            return None
        if present + 1 == len(msg):  # nothing else given
            return PutRequest(topic, body, tags, keys, props, None, 0, 0, now_ms, host,
                              deliver_at=deliver_at, delay_ms=delay_ms)
    level = get("delayLevel")
    if level is None:
        level = 0
    elif type(level) is not int or not 0 <= level <= jsonio.INT32_MAX:
        return None
    queue_id = get("queueId")
    if queue_id is not None and (type(queue_id) is not int
                                 or not 0 <= queue_id <= jsonio.INT32_MAX):
        return None
    flag = get("flag")
    if flag is None:
        flag = 0
    elif type(flag) is not int or not -jsonio.INT32_MAX - 1 <= flag <= jsonio.INT32_MAX:
        return None
    born = get("bornTimestamp")
    if born is None:
        born = now_ms
    elif type(born) is not int or not 0 <= born <= jsonio.INT64_MAX:
        return None
    return PutRequest(topic, body, tags, keys, props, queue_id, level, flag, born, host,
                      deliver_at=deliver_at, delay_ms=delay_ms)


def _encodes(text: str) -> bool:
    """The text encodes as UTF-8 (no lone surrogates), as validation.validate_text checks."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_messages(messages: list[Any], topic: str, max_body_bytes: int, host: bytes,
                   now_ms: int, trace_props: dict[str, str]) -> list[PutRequest]:
    """The messages of a batch as PutRequests; the first bad one raises, its index named."""
    requests: list[PutRequest] = []
    add = requests.append
    try:
        for msg in messages:
            request = parse_plain(msg, topic, max_body_bytes, host, now_ms, trace_props)
            add(request if request is not None else
                parse_message(msg, topic, max_body_bytes, host, now_ms, trace_props))
    except ClepsydraError as exc:
        exc.message = f"messages[{len(requests)}]: {exc.message}; the batch was refused, " \
                      "nothing stored"
        exc.args = (exc.message,)
        raise
    return requests


def check_topic(topic: str) -> None:
    validation.validate_topic_name(topic)
    validation.check_producible(topic)


def result_json(r: PutResult) -> dict[str, Any]:
    """:class:`ProduceAnswer` of a stored message (built as a dict: this is the hot path; a
    test holds the names equal to the wire type's)."""
    return {"msgId": r.msg_id, "topic": r.topic, "queueId": r.queue_id,
            "queueOffset": r.queue_offset, "commitLogOffset": r.commitlog_offset,
            "storeTimestamp": r.store_timestamp, "offsetMsgId": r.offset_msg_id}


def _acknowledge(c: StoreContext, results: list[PutResult],
                 requests: list[PutRequest]) -> list[dict[str, Any]]:
    out = [{"msgId": msg_id, "topic": topic, "queueId": queue_id,  # result_json, inlined
            "queueOffset": queue_offset, "commitLogOffset": commitlog_offset,
            "storeTimestamp": store_timestamp, "offsetMsgId": offset_msg_id}
           for (_, msg_id, topic, queue_id, queue_offset, commitlog_offset, store_timestamp,
                _, offset_msg_id, _) in results]
    if _TIMER_TOPIC in map(_TOPIC, results):  # (looked for in C: most batches have none)
        for i, r in enumerate(results):
            if r[2] == _TIMER_TOPIC:
                out[i]["deliverAt"] = r.deliver_at  # T1: a time in the past is now
    if not _ALL_OK.issuperset(map(_STATUS, results)):
        raise FlushTimeout(f"{len(results)} message(s) appended but not flushed to disk in time; "
                           "not acknowledged", out)
    c.obs.produced.inc(len(results))
    c.obs.produced_bytes.inc(sum(map(len, map(_BODY, requests))))
    return out


def produce_message(c: StoreContext, call: Call) -> Reply:
    """POST /v1/topics/{topic}/messages: 201 :class:`ProduceAnswer`, or raises."""
    request = one_request(c, call)
    return one_answer(c, call, request, c.store.put(request))


def produce_messages(c: StoreContext, call: Call) -> Reply:
    """POST /v1/topics/{topic}/messages/batch: 201 ``{results}``, or raises (nothing
    stored)."""
    return 201, produce_batch(c, call.args["topic"], call.json(), born_host(call.environ),
                              call.span)


def message_parent(call: Call) -> otel_context.Context | str | None:
    """The span's parent of a single send: the ``traceparent`` header, else the message's own
    ``traceparent`` property (O1); a body that does not read continues the header's
    (``plain_parent``: a plain one as its string)."""
    try:
        payload = call.json()
    except ClepsydraError:
        return plain_parent(call.environ)
    raw_props = payload.get("properties")
    return plain_parent(call.environ, raw_props if isinstance(raw_props, dict) else None)


def batch_parent(call: Call) -> otel_context.Context | str | None:
    """The span's parent of a batch: the ``traceparent`` header (its messages keep their
    own)."""
    return plain_parent(call.environ)


def one_request(c: StoreContext, call: Call) -> PutRequest:
    """:func:`produce_message` up to its append (nothing stored): its message as a
    PutRequest, or raises ClepsydraError; in the request's span (its trace context goes into
    the message). The first part of the poller's group (DEC-poller-group-append)."""
    topic, payload = call.args["topic"], call.json()
    c.require_accepting()
    check_topic(topic)
    host = born_host(call.environ)
    limit, now_ms, trace_props = c.settings.engine.max_body_bytes, _now_ms(), \
        _trace_props(call.span)
    return (parse_plain(payload, topic, limit, host, now_ms, trace_props)
            or parse_message(payload, topic, limit, host, now_ms, trace_props))


def one_answer(c: StoreContext, call: Call, request: PutRequest,
               outcome: PutResult | Exception) -> Reply:
    """:func:`produce_message`'s answer once its message was appended (``outcome``: its
    result, or what refused it in the poller's group, raised here), in the request's span;
    raises FLUSH_TIMEOUT. The last part of the poller's group (DEC-poller-group-append)."""
    if isinstance(outcome, Exception):
        raise outcome
    out = _acknowledge(c, [outcome], [request])[0]
    span = _span(call.span)
    if span.is_recording():
        topic = request.topic
        span.set_attributes(_SEND)
        span.set_attribute(DESTINATION, topic)
        span.set_attribute(MESSAGE_ID, outcome.msg_id)
        if request.delay_level:
            span.set_attribute(telemetry.DELAY_LEVEL, request.delay_level)
        if outcome.topic != topic:  # parked in the schedule topic (S1) or rerouted (R10)
            span.set_attribute(STORED_TOPIC, outcome.topic)
    return 201, out


def group_append(c: StoreContext, requests: list[PutRequest]) -> list[PutResult | Exception]:
    """The group's messages appended as one batch, each refused on its own
    (``MessageStore.put_group``)."""
    return c.store.put_group(requests)


def produce_batch(c: StoreContext, topic: str, payload: dict[str, Any],
                  host: bytes, span: trace.Span | None = None) -> dict[str, Any]:
    """POST /v1/topics/{topic}/messages/batch: 201 ``{results}``, or raises (nothing stored);
    ``span``: the request's (default: the current one)."""
    c.require_accepting()
    check_topic(topic)
    jsonio.check_fields(payload, BATCH_FIELDS, "batch")  # ProduceBatch, its messages read below
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise ValidationError(f"messages must be an array, got {jsonio.type_name(messages)}",
                              code="INVALID_REQUEST")
    if not 1 <= len(messages) <= MAX_BATCH:
        raise ValidationError(f"a batch holds 1 to {MAX_BATCH} messages, got {len(messages)}",
                              code="INVALID_REQUEST")
    span = _span(span)
    requests = parse_messages(messages, topic, c.settings.engine.max_body_bytes, host, _now_ms(),
                              _trace_props(span))
    results = c.store.put_batch(requests)
    out = _acknowledge(c, results, requests)
    if span.is_recording():
        span.set_attributes(_SEND)
        span.set_attribute(DESTINATION, topic)
        span.set_attribute(BATCH_COUNT, len(out))
    return {"results": out}


def _trace_props(span: trace.Span | None) -> dict[str, str]:
    """The request span's W3C context as message properties (O1)."""
    props: dict[str, str] = {}
    telemetry.inject(props, _span(span))
    return props


def _span(span: trace.Span | None) -> trace.Span:
    """The request's span: the envelope's (``Call.span``), else the current one."""
    return span if span is not None else trace.get_current_span()


def _now_ms() -> int:
    return int(time.time() * 1000)
