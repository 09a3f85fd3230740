"""Producer: send one message or a batch to the store, with tags, keys, properties and a delay
level or an exact delivery time; cancel or reschedule a pending delayed message (SPEC T1).
Every message gets a ``UNIQ_KEY`` and, inside a ``client.produce`` span, the W3C trace context
(``traceparent``) in its properties, so consumers continue its trace (SPEC O1).

    producer = Producer("http://127.0.0.1:8081")
    result = producer.send("orders", b'{"id": 1}', tags="created", keys=["order-1"],
                           delay_level=3)
    later = producer.send("orders", "remind", keys=["order-1"], delay=timedelta(hours=2))
    producer.reschedule(later.msg_id, delay=timedelta(minutes=30))
    producer.cancel(topic="orders", key="order-1")
"""

from __future__ import annotations

import base64
import functools
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

import orjson
from opentelemetry import trace

from clepsydra_client import batching
from clepsydra_client.batching import Batcher
from clepsydra_client.delivery_time import delay_ms, instant_ms
from clepsydra_client.futures import Answer, SendFuture
from clepsydra_client.ids import new_uniq_key
from clepsydra_client.message import ScheduleChange, SendResult
from clepsydra_client.routing import Router
from clepsydra_client.settings import ensure_tracing
from clepsydra_core import properties as P
from clepsydra_core.errors import RemoteError, ValidationError
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.http import HttpClient, Json, segment
from clepsydra_core.wire.produce import ProduceBatch, ProduceMessage
from clepsydra_core.wire.timers import RescheduleRequest

TRACER = "clepsydra_client"
MAX_BATCH = 500
"""Messages per batch request; longer batches are split."""
CONTEXTS_AT_ONCE = 64
"""New-trace contexts ``send_async`` draws at once (telemetry.batch_contexts)."""
MAX_KEPT_PATHS = 1024
"""Topics whose produce route a Producer keeps (then it starts again)."""
REQUEST_OVERHEAD = 160
"""What a message's JSON adds to its body in a batch request (properties, tags), roughly."""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A message to send. ``keys`` is a list (or one space-separated string). At most one of
    ``delay_level``, ``deliver_at`` (an aware datetime or epoch ms) and ``delay`` (a timedelta
    or ms) delays it (SPEC L2, T1; delivery_time.py says what is accepted)."""

    body: bytes | str
    tags: str | None = None
    keys: Sequence[str] | str = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    delay_level: int = 0
    queue_id: int | None = None
    deliver_at: datetime | int | None = None
    delay: timedelta | int | None = None
    hash_key: str | None = None
    """Sends it to the queue this key hashes to in the topic's global queue list (every
    shard's queues): the same key, the same queue (an orderly send); instead of
    ``queue_id``."""


DELAY_ARGUMENTS = ("delay_level", "deliver_at", "delay")
"""The SDK's three ways to delay a message; one at most (SPEC T1)."""


def delivery(delay_level: int = 0, deliver_at: datetime | int | None = None,
             delay: timedelta | int | None = None) -> tuple[int | None, int | None, int | None]:
    """The wire values (delayLevel, deliverAt, delayMs) of a message's delay, at most one not
    None. ValueError naming the arguments when more than one is given, or when a time is
    malformed; ValidationError (L2) for a negative level."""
    if not delay_level and deliver_at is None and delay is None:
        return None, None, None  # the common case: not delayed
    given = [name for name, value in zip(DELAY_ARGUMENTS, (delay_level or None, deliver_at,
                                                           delay), strict=True)
             if value is not None]
    if len(given) > 1:
        raise ValueError(f"give at most one of {', '.join(DELAY_ARGUMENTS)}: got "
                         f"{' and '.join(given)}")
    if delay_level < 0:
        raise ValidationError(f"delay level must be >= 0, got {delay_level}",
                              rule="L2", code="INVALID_DELAY_LEVEL")
    if deliver_at is not None:
        return None, instant_ms(deliver_at), None
    if delay is not None:
        return None, None, delay_ms(delay)
    return delay_level, None, None


def _keys_text(keys: Sequence[str] | str) -> str | None:
    if isinstance(keys, str):
        return keys.strip() or None
    for key in keys:
        if key.split() != [key]:  # empty, or a white space in it (str.isspace's kind)
            raise ValidationError(f"message key {key!r} must be non-empty without spaces "
                                  "(keys are stored space-separated)", code="INVALID_REQUEST")
    return " ".join(keys) or None


def body_fields(body: bytes | str) -> tuple[str | None, str | None]:
    """(body, bodyBase64): the text when the body is UTF-8, else its bytes in base64."""
    if isinstance(body, str):
        return body, None
    try:
        return body.decode(), None
    except UnicodeDecodeError:
        return None, base64.b64encode(body).decode()


def message_request(message: OutgoingMessage, uniq_key: str, span: trace.Span | None = None,
                    traceparent: str | None = None) -> Json:
    """The v1 produce body of one message, a :class:`ProduceMessage`'s JSON (``UNIQ_KEY`` and
    a trace context added: the given ``traceparent``, else that of ``span``, default the
    current span). Its values are checked here (delay, keys), so the JSON is made with
    :meth:`ProduceMessage.json_of`, without the frozen instance (per-message cost)."""
    level, at_ms, in_ms = delivery(message.delay_level, message.deliver_at, message.delay)
    props: dict[str, str] = dict(message.properties)
    props.setdefault(P.UNIQ_KEY, uniq_key)
    if P.TRACEPARENT not in props:
        if traceparent is not None:
            props[P.TRACEPARENT] = traceparent
        else:
            telemetry.inject(props, span)
    text, encoded = body_fields(message.body)
    return ProduceMessage.json_of(
        body=text, body_base64=encoded, tags=message.tags or None,
        keys=_keys_text(message.keys), properties=props, queue_id=message.queue_id,
        delay_level=level, deliver_at=at_ms, delay_ms=in_ms)


class Producer:
    """Sends messages to a store, or to a cluster of store shards through the one address it is
    given (routing.py: plain sends spread over every shard, a failed one sent again to another;
    ``queue_id`` and ``hash_key`` name one queue of the topic's global queue list). Thread-safe.
    """

    def __init__(self, store_url: str, *, timeout_s: float = 10.0,
                 http: HttpClient | None = None, linger_ms: float = batching.LINGER_MS,
                 batch_messages: int = batching.BATCH_MESSAGES,
                 batch_bytes: int = batching.BATCH_BYTES,
                 max_pending: int = batching.MAX_PENDING, token: str | None = None) -> None:
        """``linger_ms``, ``batch_messages``, ``batch_bytes`` and ``max_pending`` shape the
        batches of ``send_async`` (batching.py); ``send`` and ``send_batch`` ignore them.
        ``token``: the bearer token (else ``CLEPSYDRA_TOKEN``)."""
        ensure_tracing()
        self.http = http or HttpClient(store_url, timeout_s=timeout_s, service="store",
                                       token=token)
        self._tracer = telemetry.tracer(TRACER)
        self._batch_options: dict[str, Any] = {
            "linger_ms": linger_ms, "batch_messages": min(batch_messages, MAX_BATCH),
            "batch_bytes": batch_bytes, "max_pending": max_pending}
        self._batcher: Batcher | None = None
        self._batcher_lock = threading.Lock()
        self._contexts: list[str | int | None] = []
        self._paths: dict[str, str] = {}
        self.router = Router(self.http)

    def send(self, topic: str, body: bytes | str, *, tags: str | None = None,
             keys: Sequence[str] | str = (), properties: Mapping[str, str] | None = None,
             delay_level: int = 0, queue_id: int | None = None,
             deliver_at: datetime | int | None = None,
             delay: timedelta | int | None = None,
             hash_key: str | None = None) -> SendResult:
        """Send one message; returns where it was stored (SPEC P2: after the append).
        ``deliver_at`` (an aware datetime or epoch ms) or ``delay`` (a timedelta or ms) makes
        it a timer message (SPEC T1), delivered no earlier than that; ``result.deliver_at``
        is the time the store took. At most one of ``delay_level``, ``deliver_at``, ``delay``
        (ValueError before any request). ``queue_id`` (an index into the topic's queues,
        shard by shard) or ``hash_key`` (hashed over them) sends it to that one queue."""
        if hash_key is not None:
            queue_id = self._pinned(topic, queue_id, hash_key)
        return self._send(topic, body, tags, keys, properties, delay_level, queue_id,
                          deliver_at, delay)

    def send_message(self, topic: str, message: OutgoingMessage) -> SendResult:
        queue_id = self._pinned(topic, message.queue_id, message.hash_key)
        return self._send(topic, message.body, message.tags, message.keys, message.properties,
                          message.delay_level, queue_id, message.deliver_at, message.delay)

    def _pinned(self, topic: str, queue_id: int | None, hash_key: str | None) -> int | None:
        """The global queue index of a send that names one queue (``queue_id``) or hashes to
        one (``hash_key``); None for a plain send."""
        if hash_key is None:
            return queue_id
        if queue_id is not None:
            raise ValueError("give queue_id or hash_key, not both")
        return self.router.hashed(topic, hash_key)

    def _send(self, topic: str, body: bytes | str, tags: str | None,
              keys: Sequence[str] | str, properties: Mapping[str, str] | None,
              delay_level: int, queue_id: int | None, deliver_at: datetime | int | None,
              delay: timedelta | int | None) -> SendResult:
        """One message in one request, inside its ``client.produce`` span. A span that will
        not be recorded is not made at all (DEC-sdk-send-path): its ``traceparent``
        (:meth:`_trace_context`: a fresh span id in the current span's trace, or a new
        trace's, drawn 64 at a time like ``send_async``'s) goes in the message's properties
        and the request's header, as the context-only span's did (DEC-unrecorded-spans). A
        recorded span is made current around the request and names the stored message."""
        context = self._trace_context()
        if isinstance(context, str):  # not recorded: its traceparent alone
            return self._post(topic, body, tags, keys, properties, delay_level, queue_id,
                              deliver_at, delay, context)[0]
        span = self._start_span(topic, context)
        with trace.use_span(span, end_on_exit=True):
            result, uniq_key = self._post(topic, body, tags, keys, properties, delay_level,
                                          queue_id, deliver_at, delay, None)
            if span.is_recording():
                span.set_attribute(telemetry.MESSAGE_ID, result.msg_id)
                span.set_attribute(telemetry.UNIQ_KEY, uniq_key)
                if delay_level:
                    span.set_attribute(telemetry.DELAY_LEVEL, delay_level)
            return result

    def _post(self, topic: str, body: bytes | str, tags: str | None,
              keys: Sequence[str] | str, properties: Mapping[str, str] | None,
              delay_level: int, queue_id: int | None, deliver_at: datetime | int | None,
              delay: timedelta | int | None, traceparent: str | None
              ) -> tuple[SendResult, str]:
        """Send the message; ``traceparent``: its unrecorded span's (the message's, unless
        it brings its own, and the request's), else the current span's is taken."""
        if delay_level or deliver_at is not None or delay is not None:
            level, at_ms, in_ms = delivery(delay_level, deliver_at, delay)  # may refuse
        else:
            level = at_ms = in_ms = None
        if properties:
            props = dict(properties)
            uniq_key = props.get(P.UNIQ_KEY) or new_uniq_key()
            props.setdefault(P.UNIQ_KEY, uniq_key)
        else:  # the common shape: no properties of its own
            uniq_key = new_uniq_key()
            props = {P.UNIQ_KEY: uniq_key}
        headers: dict[str, str] | None = None
        if traceparent is not None:
            headers = {P.TRACEPARENT: traceparent}
            props.setdefault(P.TRACEPARENT, traceparent)
        elif P.TRACEPARENT not in props:
            telemetry.inject(props)  # the current span's context, also the request's
            if P.TRACEPARENT in props:
                headers = {P.TRACEPARENT: props[P.TRACEPARENT]}
                if P.TRACESTATE in props:
                    headers[P.TRACESTATE] = props[P.TRACESTATE]
        text, encoded = (body, None) if type(body) is str else body_fields(body)
        path = self._topic_path(topic)
        clustered = self.router.clustered
        target: HttpClient | None = None if clustered else self.http
        if queue_id is not None and clustered:  # one queue of one shard
            queue = self.router.queue_of(topic, queue_id)
            queue_id, target = queue.queue_id, self.router.client(queue.shard)
        req = ProduceMessage.json_of(
            body=text, body_base64=encoded, tags=tags or None,
            keys=_keys_text(keys) if keys else None, properties=props, queue_id=queue_id,
            delay_level=level, deliver_at=at_ms, delay_ms=in_ms)
        if target is not None:
            raw = target.post(path, req, headers=headers)
        else:  # a plain send over the shards (routing.py)
            raw = self.router.send(topic, lambda http: http.post(path, req, headers=headers))[0]
        return SendResult.from_json(raw, uniq_key), uniq_key

    def _topic_path(self, topic: str) -> str:
        """``/v1/topics/{topic}/messages``, kept per topic (its percent-encoding is per-call
        work otherwise)."""
        path = self._paths.get(topic)
        if path is None:
            if len(self._paths) >= MAX_KEPT_PATHS:
                self._paths.clear()
            path = self._paths[topic] = self.http.path("/v1/topics/{}/messages", topic)
        return path

    def send_batch(self, topic: str, messages: Iterable[OutgoingMessage]) -> list[SendResult]:
        """Send many messages to one topic in as few requests as possible; results in order.
        Each message gets its own ``client.produce`` span and trace context."""
        items = [replace(m, queue_id=self._pinned(topic, m.queue_id, m.hash_key), hash_key=None)
                 if m.hash_key is not None else m for m in messages]
        for message in items:  # a bad delay refuses the batch before any request is sent
            delivery(message.delay_level, message.deliver_at, message.delay)
        results: list[SendResult] = []
        for start in range(0, len(items), MAX_BATCH):
            results.extend(self._send_chunk(topic, items[start:start + MAX_BATCH]))
        return results

    def _send_chunk(self, topic: str, chunk: list[OutgoingMessage]) -> list[SendResult]:
        spans: list[trace.Span] = []
        reqs: list[Json] = []
        keys: list[str] = []
        try:
            # one trace context per message; a span object only when it is recorded
            contexts = telemetry.batch_contexts(self._tracer, len(chunk))
            for message, context in zip(chunk, contexts, strict=True):
                uniq_key = message.properties.get(P.UNIQ_KEY) or new_uniq_key()
                keys.append(uniq_key)
                if isinstance(context, str):
                    reqs.append(message_request(message, uniq_key, traceparent=context))
                    spans.append(trace.INVALID_SPAN)
                    continue
                kw: dict[str, Any] = {"kind": trace.SpanKind.PRODUCER,
                                      "attributes": self._attributes(topic)}
                span = (self._tracer.start_span("client.produce", **kw) if context is None
                        else telemetry.start_decided(self._tracer, context, "client.produce",
                                                     **kw))
                spans.append(span)
                reqs.append(message_request(message, uniq_key, span))
            answers = self._routed_batch(topic, reqs)
            results = [SendResult.from_json(a, k) for a, k in zip(answers, keys, strict=False)]
            for span, message, result in zip(spans, chunk, results, strict=False):
                if not span.is_recording():
                    continue
                span.set_attribute(telemetry.MESSAGE_ID, result.msg_id)
                if message.delay_level:
                    span.set_attribute(telemetry.DELAY_LEVEL, message.delay_level)
            return results
        finally:
            for span in spans:
                span.end()

    def _routed_batch(self, topic: str, reqs: list[Json]) -> list[Any]:
        """The answers of one batch of request bodies: to one shard (in turn, another if it
        refused the batch unstored, routing.py); with messages pinned to a queue
        (``queueId``, a global index) each shard's share goes to its shard, the answers back
        in the order of ``reqs``."""
        path = self.http.path("/v1/topics/{}/messages/batch", topic)
        if not self.router.clustered:
            return self.http.post(path, ProduceBatch.of_json(reqs)).get("results") or []
        pinned = [i for i, r in enumerate(reqs) if r.get(_QUEUE_ID) is not None]
        if not pinned:
            raw = self.router.send(topic, lambda h: h.post(path, ProduceBatch.of_json(reqs)))[0]
            return raw.get("results") or []
        answers: list[Any] = [None] * len(reqs)
        by_shard: dict[int | None, list[int]] = {}
        for i, req in enumerate(reqs):
            if req.get(_QUEUE_ID) is None:
                by_shard.setdefault(None, []).append(i)
                continue
            queue = self.router.queue_of(topic, req[_QUEUE_ID])
            reqs[i] = {**req, _QUEUE_ID: queue.queue_id}
            by_shard.setdefault(queue.shard, []).append(i)
        for shard, indexes in by_shard.items():
            part = ProduceBatch.of_json([reqs[i] for i in indexes])
            if shard is None:
                raw = self.router.send(topic, functools.partial(_post, path, part))[0]
            else:
                raw = self.router.client(shard).post(path, part)
            for i, answer in zip(indexes, raw.get("results") or [], strict=False):
                answers[i] = answer
        return answers

    @staticmethod
    def _attributes(topic: str) -> dict[str, str]:
        return {telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM,
                telemetry.OPERATION_TYPE: telemetry.SEND, telemetry.DESTINATION: topic}

    # ---- asynchronous sends with automatic batching (batching.py) --------------------------

    def send_async(self, topic: str, body: bytes | str, *, tags: str | None = None,
                   keys: Sequence[str] | str = (), properties: Mapping[str, str] | None = None,
                   delay_level: int = 0, queue_id: int | None = None,
                   deliver_at: datetime | int | None = None,
                   delay: timedelta | int | None = None,
                   hash_key: str | None = None) -> Future[SendResult]:
        """Accept one message for a batched send; its future holds the result or the error.
        A bad message (its delay, keys) raises here and is not accepted."""
        if hash_key is not None:
            queue_id = self._pinned(topic, queue_id, hash_key)
        return self._accept(topic, body, tags, keys, properties, delay_level, queue_id,
                            deliver_at, delay)

    def send_message_async(self, topic: str, message: OutgoingMessage) -> Future[SendResult]:
        queue_id = message.queue_id
        if message.hash_key is not None:
            queue_id = self._pinned(topic, queue_id, message.hash_key)
        return self._accept(topic, message.body, message.tags, message.keys, message.properties,
                            message.delay_level, queue_id, message.deliver_at, message.delay)

    def _accept(self, topic: str, body: bytes | str, tags: str | None,
                keys: Sequence[str] | str, properties: Mapping[str, str] | None,
                delay_level: int, queue_id: int | None, deliver_at: datetime | int | None,
                delay: timedelta | int | None) -> Future[SendResult]:
        """Check and accept one message: its ``UNIQ_KEY`` and trace context are set here, its
        JSON is built when its batch is sent (:func:`_message_json`). The trace context is
        that of a ``client.produce`` span in the current context; the span itself is made
        only when it is recorded (then it ends with the future), else just its
        ``traceparent`` (telemetry.batch_contexts)."""
        if delay_level or deliver_at is not None or delay is not None:
            level, at_ms, in_ms = delivery(delay_level, deliver_at, delay)  # may refuse
        else:
            level = at_ms = in_ms = None
        keys_text = _keys_text(keys)
        text, encoded = body_fields(body)
        span: trace.Span | None = None
        if not properties:  # the common shape: no properties of its own, one tuple directly
            uniq_key = new_uniq_key()
            context = self._trace_context()
            if isinstance(context, str):
                message: batching.Message = (
                    uniq_key, text, encoded, tags or None, keys_text, queue_id, level, at_ms,
                    in_ms, P.UNIQ_KEY, uniq_key, P.TRACEPARENT, context)
            else:
                span = self._start_span(topic, context)
                props = {P.UNIQ_KEY: uniq_key}
                telemetry.inject(props, span)
                message = (uniq_key, text, encoded, tags or None, keys_text, queue_id, level,
                           at_ms, in_ms, *chain.from_iterable(props.items()))
        else:
            props = dict(properties)
            uniq_key = props.get(P.UNIQ_KEY) or new_uniq_key()
            props.setdefault(P.UNIQ_KEY, uniq_key)
            if P.TRACEPARENT not in props:
                context = self._trace_context()
                if isinstance(context, str):
                    props[P.TRACEPARENT] = context
                else:
                    span = self._start_span(topic, context)
                    telemetry.inject(props, span)
            elif telemetry.unrecorded(self._tracer) is None:  # its own context: a span if
                span = self._tracer.start_span(  # recorded
                    "client.produce", kind=trace.SpanKind.PRODUCER,
                    attributes=self._attributes(topic))
            message = (uniq_key, text, encoded, tags or None, keys_text, queue_id, level, at_ms,
                       in_ms, *chain.from_iterable(props.items()))
        size = (len(text) if text is not None else len(encoded or "")) + REQUEST_OVERHEAD
        future = SendFuture(uniq_key)
        if span is not None:
            if span.is_recording():
                future.add_done_callback(functools.partial(_end_span, span, level or 0))
            else:
                span.end()
        try:
            self._batching().submit(topic, message, size, future)
        except BaseException as exc:
            future.set_exception(exc)  # ends its span
            raise
        return future

    def _start_span(self, topic: str, context: int | None) -> trace.Span:
        """The ``client.produce`` span of a message whose context ``_trace_context`` gave
        as a sampled trace id or None (the SDK decides)."""
        kw: dict[str, Any] = {"kind": trace.SpanKind.PRODUCER,
                              "attributes": self._attributes(topic)}
        if context is None:
            return self._tracer.start_span("client.produce", **kw)
        return telemetry.start_decided(self._tracer, context, "client.produce", **kw)

    def _trace_context(self) -> str | int | None:
        """``telemetry.batch_contexts(tracer, 1)[0]`` for one message; without a current span
        (new traces) drawn :data:`CONTEXTS_AT_ONCE` at a time, which costs half as much a
        message (``list.pop`` is atomic: threads may share the stock)."""
        if trace.get_current_span().get_span_context().is_valid:
            return telemetry.batch_contexts(self._tracer, 1)[0]
        stock = self._contexts
        if not stock:
            stock = self._contexts = telemetry.batch_contexts(self._tracer, CONTEXTS_AT_ONCE)
        try:
            return stock.pop()
        except IndexError:  # another thread took the last one
            return telemetry.batch_contexts(self._tracer, 1)[0]

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every message accepted by ``send_async`` has its outcome (False if
        ``timeout_s`` passed first)."""
        batcher = self._batcher
        return True if batcher is None else batcher.flush(timeout_s)

    def _batching(self) -> Batcher:
        batcher = self._batcher
        if batcher is None:
            with self._batcher_lock:
                if self._batcher is None:
                    self._batcher = Batcher(self._post_batch, self._post_one,
                                            **self._batch_options)
                batcher = self._batcher
        return batcher

    def _post_batch(self, topic: str, messages: list[batching.Message]) -> list[Answer]:
        if self.router.clustered and any(m[5] is not None for m in messages):
            answers: list[Answer] = self._routed_batch(topic, [_message_json(m)
                                                               for m in messages])
        else:
            path = self.http.path("/v1/topics/{}/messages/batch", topic)
            body = ProduceBatch.of_encoded(_encoded(messages))
            raw = self.router.send(topic, lambda h: h.post(path, body))[0]
            answers = raw.get("results") or []
        if not all(type(a) is dict for a in answers):
            raise RemoteError("the store's batch answer holds a result that is not an object")
        return answers[:len(messages)]

    def _post_one(self, topic: str, message: batching.Message) -> Answer:
        path = self.http.path("/v1/topics/{}/messages", topic)
        req = _message_json(message)
        if message[5] is not None and self.router.clustered:
            queue = self.router.queue_of(topic, message[5])
            return self.router.client(queue.shard).post(path, {**req, _QUEUE_ID: queue.queue_id})
        return self.router.send(topic, lambda h: h.post(path, req))[0]

    # ---- pending delayed messages: cancel and reschedule (SPEC T1) -------------------------

    def cancel(self, msg_id: str | None = None, *, topic: str | None = None,
               key: str | None = None) -> ScheduleChange:
        """Cancel a pending delayed message (a timer or a level message) by msgId, or every
        pending one of ``topic`` with ``key``: it is never delivered. Raises
        ``MessageNotFound`` (404: none known) or, when it was already delivered (every one,
        by key), the 409 ``ALREADY_DELIVERED`` error."""
        path, params = _target(msg_id, topic, key)
        return ScheduleChange.from_json(self.http.request("DELETE", path, params=params))

    def reschedule(self, msg_id: str | None = None, *, topic: str | None = None,
                   key: str | None = None, deliver_at: datetime | int | None = None,
                   delay: timedelta | int | None = None) -> ScheduleChange:
        """Move a pending delayed message (by msgId, or every pending one of ``topic`` with
        ``key``) to ``deliver_at`` or to ``delay`` from now (exactly one); a level message
        becomes a timer message, its msgId unchanged. Errors as :meth:`cancel`."""
        if (deliver_at is None) == (delay is None):
            raise ValueError("give exactly one of deliver_at, delay")
        body = RescheduleRequest(
            deliver_at=None if deliver_at is None else instant_ms(deliver_at),
            delay_ms=None if delay is None else delay_ms(delay)).to_json()
        path, params = _target(msg_id, topic, key)
        return ScheduleChange.from_json(self.http.request("PATCH", path, params=params,
                                                          json=body))

    def close(self) -> None:
        """Send what ``send_async`` accepted (never dropped), then close the connections."""
        batcher = self._batcher
        if batcher is not None:
            batcher.close()
        self.router.close()
        self.http.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _target(msg_id: str | None, topic: str | None,
            key: str | None) -> tuple[str, dict[str, str] | None]:
    """The route and query of a cancel or reschedule: one msgId, or a topic with a key."""
    if msg_id is not None:
        if topic is not None or key is not None:
            raise ValueError("give a msg_id, or topic and key, not both")
        if not msg_id:
            raise ValueError("msg_id is empty")
        return f"/v1/messages/{segment(msg_id)}", None
    if not topic or not key:
        raise ValueError("give a msg_id, or both topic and key")
    return "/v1/messages", {"topic": topic, "key": key}


_QUEUE_ID = ProduceMessage.json_name_of()["queue_id"]
"""A produce body's queue field (a global queue index until routed to its shard)."""
ENCODE_CHUNK = 32
"""Messages encoded by one ``orjson.dumps`` when a batch is sent: their JSON values die at once
instead of living through the request (and the garbage collector's passes) as a batch's do."""


def _encoded(messages: list[batching.Message]) -> list[bytes]:
    """A batch's messages as JSON arrays of :data:`ENCODE_CHUNK` messages."""
    return [orjson.dumps([_message_json(m) for m in messages[i:i + ENCODE_CHUNK]])
            for i in range(0, len(messages), ENCODE_CHUNK)]


def _message_json(message: batching.Message) -> Json:
    """The :class:`ProduceMessage` JSON of a message ``_accept`` took: one flat tuple of plain
    values (``UNIQ_KEY``, the fields, then property names and values in turn), which the
    garbage collector stops following at its first pass."""
    return ProduceMessage.json_of(
        body=message[1], body_base64=message[2], tags=message[3], keys=message[4],
        properties=dict(zip(message[9::2], message[10::2], strict=True)),
        queue_id=message[5], delay_level=message[6], deliver_at=message[7],
        delay_ms=message[8])


def _post(path: str, body: Json, http: HttpClient) -> Json:
    return http.post(path, body)


def _end_span(span: trace.Span, delay_level: int, future: Future[SendResult]) -> None:
    if future.cancelled() or future.exception() is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR))
    else:
        span.set_attribute(telemetry.MESSAGE_ID, future.result().msg_id)
        if delay_level:
            span.set_attribute(telemetry.DELAY_LEVEL, delay_level)
    span.end()
