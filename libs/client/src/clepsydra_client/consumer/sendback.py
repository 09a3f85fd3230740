"""Returning failed messages to the broker (SPEC R1, R9, R10, R12).

Clustering consumers call the retry service's send-back with the message's CommitLog offset,
the delay level (R11), maxReconsumeTimes, the original topic, the failure reason and the
consumer id. When that call fails, the client itself sends a new message to ``%RETRY%<group>``
through the store's plain produce (R9). Orderly consumers dead-letter through R10: a plain send
to ``%RETRY%<group>`` with ``RECONSUME_TIME`` = the max.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from clepsydra_client.message import Attempt, Message, append_failure
from clepsydra_client.producer import body_fields
from clepsydra_client.routing import Router, sent_elsewhere
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError, GroupNotFound, NoPermission, NotFound, RemoteError
from clepsydra_core.groups import GroupSettings
from clepsydra_core.retry_rules import (
    DEFAULT_MAX_RECONSUME_TIMES,
    max_reconsume_times_or,
    retry_level_for,
)
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.http import HttpClient, error_from_response
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.produce import ProduceAnswer, ProduceMessage
from clepsydra_core.wire.retry import (
    SendBackAnswer,
    SendBackBatch,
    SendBackRequest,
    SendBackResults,
)

logger = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class SendBackOutcome:
    """Where a failed message went: ``RETRY``, ``DLQ`` or ``DROPPED`` (the group keeps no
    retry queues), and whether the R9 fallback carried it."""

    outcome: str
    topic: str
    delay_level: int
    msg_id: str
    fallback: bool = False


def failure_reason(exc: BaseException | None, default: str = "listener returned "
                   "RECONSUME_LATER") -> str:
    """``"ValueError: bad order"``: exception type and text."""
    if exc is None:
        return default
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fallback_properties(msg: Message, *, reconsume_times: int, max_reconsume_times: int,
                        reason: str, consumer_id: str) -> dict[str, str]:
    """Properties of an R9/R12 copy: the message's own (reserved names only where a client may
    set them), plus the retry fields."""
    props = {k: v for k, v in msg.properties.items()
             if k not in P.RESERVED or k in P.CLIENT_SETTABLE}
    props.setdefault(P.RETRY_TOPIC, msg.origin_topic)
    props.setdefault(P.ORIGIN_MESSAGE_ID, msg.msg_id)
    props[P.RECONSUME_TIME] = str(reconsume_times)
    props[P.MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props[P.FAILURE_HISTORY] = append_failure(
        msg.properties.get(P.FAILURE_HISTORY),
        Attempt(int(time.time() * 1000), consumer_id, reason, msg.reconsume_times))
    return props


class BatchSender:
    """Gathers concurrent send-backs of one group into ``POST /v1/groups/{g}/send-back/batch``
    calls (each item with where it was pulled, so the retry service reads a batch's headers in
    one pull). No thread of its own: the first caller waits ``linger_s`` for others, sends what
    has gathered (up to ``max_items``) and hands each caller its own result. A retry service
    without the batch route (404) is called one message at a time."""

    def __init__(self, retry: HttpClient, group: str, *, max_items: int = 100,
                 linger_s: float = 0.005) -> None:
        self.retry = retry
        self.group = group
        self.max_items = max_items
        self.linger_s = linger_s
        self.batch_route = True
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._leading = False

    def submit(self, body: SendBackRequest) -> SendBackAnswer:
        """The retry service's answer for one send-back; ClepsydraError when it failed."""
        if not self.batch_route:
            return self._single(body)
        pending = _Pending(body)
        with self._lock:
            self._queue.append(pending)
            lead = not self._leading
            self._leading = True
        if lead:
            time.sleep(self.linger_s)
            while True:
                with self._lock:
                    batch = self._queue[:self.max_items]
                    del self._queue[:self.max_items]
                    if not batch:
                        self._leading = False
                        break
                self._flush(batch)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _single(self, body: SendBackRequest) -> SendBackAnswer:
        return read_answer(SendBackAnswer, self.retry.post(
            self.retry.path("/v1/groups/{}/send-back", self.group),
            body.without_hints().to_json()), "send-back")

    def _flush(self, batch: list[_Pending]) -> None:
        path = self.retry.path("/v1/groups/{}/send-back/batch", self.group)
        try:
            try:
                raw = self.retry.post(path, SendBackBatch([p.body for p in batch]).to_json())
            except NotFound as exc:
                if isinstance(exc, GroupNotFound):
                    raise
                logger.info("retry service has no batch send-back (%s): one at a time", exc)
                self.batch_route = False
                for p in batch:
                    try:
                        p.result = self._single(p.body)
                    except ClepsydraError as one:
                        p.error = one
                return
            results = read_answer(SendBackResults, raw, "send-back batch").results
            for i, p in enumerate(batch):
                item = results[i] if i < len(results) else None
                if item is None:
                    p.error = RemoteError(f"batch send-back gave no result for item {i}")
                elif isinstance(item, ErrorAnswer):
                    p.error = error_from_response(400, item.to_json(), path)
                else:
                    p.result = item
        except ClepsydraError as exc:
            for p in batch:
                p.error = exc
        finally:
            for p in batch:
                p.done.set()


_NO_ANSWER = SendBackAnswer("", None, None, None)
"""A pending send-back's result until its batch answers (an error replaces it otherwise)."""


class _Pending:
    __slots__ = ("body", "done", "error", "result")

    def __init__(self, body: SendBackRequest) -> None:
        self.body = body
        self.done = threading.Event()
        self.result = _NO_ANSWER
        self.error: ClepsydraError | None = None




GROUP_SETTINGS_TTL_S = 30.0
"""How long the fallback trusts the group's retryMaxTimes it read from the store."""


class SendBack:
    """Send-back for one group and consumer."""

    def __init__(self, group: str, consumer_id: str, *, store: HttpClient,
                 retry: HttpClient | None, batch: bool = True,
                 router: Router | None = None) -> None:
        self.group = group
        self.consumer_id = consumer_id
        self.store = store
        self.router = router or Router(store)
        """Where a fallback copy is sent: any store shard that takes messages (R9)."""
        self.retry = retry
        self.batcher = BatchSender(retry, group) if retry is not None else None
        self._group_max_cache: tuple[float, int | None] | None = None
        if self.batcher is not None and not batch:
            self.batcher.batch_route = False
        self._tracer = telemetry.tracer("clepsydra_client")

    def send_back(self, msg: Message, delay_level: int, max_reconsume_times: int | None,
                  reason: str) -> SendBackOutcome:
        """R1 through the retry service; on any failure the R9 fallback. Raises only when
        both fail (the caller then retries locally). ``max_reconsume_times`` None leaves the
        group's retryMaxTimes in charge (R5)."""
        with self._tracer.start_as_current_span(
                "client.send_back", kind=trace.SpanKind.CLIENT,
                attributes=self._attributes(msg, delay_level)) as span:
            if self.batcher is not None:
                # A batch carries several threads' send-backs in one call: each item names
                # its own attempt, so the retry service's span continues the right trace.
                carrier = telemetry.inject({})
                body = SendBackRequest(
                    commitlog_offset=msg.commitlog_offset, delay_level=delay_level,
                    max_reconsume_times=max_reconsume_times, origin_topic=msg.origin_topic,
                    reason=reason, consumer_id=self.consumer_id,
                    topic=msg.store_topic or msg.topic, queue_id=msg.queue_id,
                    queue_offset=msg.queue_offset, traceparent=carrier.get(P.TRACEPARENT),
                    shard=msg.shard or None)
                try:
                    outcome = _outcome(self.batcher.submit(body))
                    span.set_attribute(telemetry.OUTCOME, outcome.outcome)
                    return outcome
                except ClepsydraError as exc:
                    logger.warning("send-back failed, sending to the retry topic directly (R9) "
                                   "group=%s msg_id=%s error=%s", self.group, msg.msg_id, exc)
            max_times = max_reconsume_times_or(max_reconsume_times, self._group_max(msg))
            outcome = self.fallback(msg, delay_level, max_times, reason)
            span.set_attribute(telemetry.OUTCOME, outcome.outcome)
            span.set_attribute(telemetry.FALLBACK, True)
            return outcome

    def _group_max(self, msg: Message) -> int:
        """R5 as the retry service applies it when the consumer names no max: the group's
        retryMaxTimes (read from the store, which keeps it; cached), else the message's
        MAX_RECONSUME_TIMES, else 16."""
        now = time.monotonic()
        cached = self._group_max_cache
        if cached is None or now - cached[0] > GROUP_SETTINGS_TTL_S:
            try:
                doc = self.store.get(self.store.path("/v1/groups/{}/settings", self.group))
                cached = (now, GroupSettings.from_json(doc).retry_max_times)
            except ClepsydraError as exc:
                logger.info("group settings not readable for the fallback group=%s: %s",
                            self.group, exc)
                cached = (now, None)
            self._group_max_cache = cached
        if cached[1] is not None:
            return cached[1]
        return max_reconsume_times_or(msg.max_reconsume_times, DEFAULT_MAX_RECONSUME_TIMES)

    def _attributes(self, msg: Message, delay_level: int) -> dict[str, str | int | bool]:
        return {telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM,
                telemetry.OPERATION_TYPE: telemetry.SETTLE,
                telemetry.OPERATION_NAME: "send_back",
                telemetry.DESTINATION: msg.origin_topic, telemetry.MESSAGE_ID: msg.msg_id,
                telemetry.CONSUMER_GROUP: self.group, telemetry.DELAY_LEVEL: delay_level,
                telemetry.RECONSUME_TIMES: msg.reconsume_times}

    def fallback(self, msg: Message, delay_level: int, max_reconsume_times: int,
                 reason: str) -> SendBackOutcome:
        """R9 with the retry service's ladder (R5, R6, R7): dead-lettered when the service
        would (reconsumeTimes >= max, or a level below 0: a plain send that R10 reroutes),
        else a new message to ``%RETRY%<group>`` with reconsumeTimes + 1, delayed by the
        listener's level or 3 + reconsumeTimes (R10 leaves delayed sends alone)."""
        if delay_level < 0 or msg.reconsume_times >= max_reconsume_times:
            return self._send_retry_copy(msg, 0, max(msg.reconsume_times + 1,
                                                     max_reconsume_times),
                                         max_reconsume_times, reason, fallback=True)
        level = delay_level if delay_level > 0 else retry_level_for(msg.reconsume_times)
        return self._send_retry_copy(msg, level, msg.reconsume_times + 1, max_reconsume_times,
                                     reason, fallback=True)

    def _send(self, topic: str, path: str, req: dict[str, Any]) -> dict[str, Any]:
        """A plain produce of the R9/R12 copy: with one store shard, to the store; with more,
        to a shard that takes messages, the retry topic's route read first; a retry topic that
        exists on no shard yet goes to the first shard that takes it (its first message makes
        it there)."""
        if not self.router.clustered:
            return self.store.post(path, req)
        if self.router.route(topic) is None:  # not made on any shard yet
            last: ClepsydraError | None = None
            for member in self.router.members():
                if not member.writable:
                    continue
                try:
                    return self.router.client(member.id).post(path, req)
                except ClepsydraError as exc:
                    if not sent_elsewhere(exc):
                        raise
                    last = exc
            raise last or NoPermission("no store shard takes messages now", rule="R2")
        return self.router.send(topic, lambda http: http.post(path, req))[0]

    def dead_letter(self, msg: Message, max_reconsume_times: int, reason: str) -> SendBackOutcome:
        """R12: an orderly consumer gave up locally; ``RECONSUME_TIME`` = max makes the store
        reroute the copy to ``%DLQ%<group>`` (R10)."""
        attributes = self._attributes(msg, 0)
        attributes[telemetry.ORDERLY] = True
        with self._tracer.start_as_current_span("client.send_back", kind=trace.SpanKind.CLIENT,
                                                attributes=attributes):
            return self._send_retry_copy(msg, 0, max_reconsume_times, max_reconsume_times,
                                         reason, fallback=False)

    def _send_retry_copy(self, msg: Message, level: int, reconsume: int, max_times: int,
                         reason: str, *, fallback: bool) -> SendBackOutcome:
        props = fallback_properties(msg, reconsume_times=reconsume,
                                    max_reconsume_times=max_times, reason=reason,
                                    consumer_id=self.consumer_id)
        for name in (P.TRACEPARENT, P.TRACESTATE):  # the copy continues from this attempt
            props.pop(name, None)
        telemetry.inject(props)
        text, encoded = body_fields(msg.body)
        req = ProduceMessage(body=text, body_base64=encoded, tags=msg.tags or None,
                             keys=" ".join(msg.keys) or None, properties=props,
                             delay_level=level if level > 0 else None).to_json()
        topic = naming.retry_topic(self.group)
        path = self.store.path("/v1/topics/{}/messages", topic)
        # a plain send: to any shard that takes messages (DEC-store-shards); the retry topic is
        # made there at its first message (R9)
        stored_at = read_answer(ProduceAnswer, self._send(topic, path, req), "produce")
        stored = stored_at.topic
        outcome = "DLQ" if naming.is_dlq_topic(stored) else "RETRY"
        logger.info("sent to %s outcome=%s group=%s msg_id=%s reconsume_times=%d level=%d",
                    topic, outcome, self.group, msg.msg_id, reconsume, level)
        return SendBackOutcome(outcome, stored, level, stored_at.msg_id, fallback)


def _outcome(answer: SendBackAnswer) -> SendBackOutcome:
    return SendBackOutcome(outcome=answer.outcome, topic=answer.topic or "",
                           delay_level=answer.delay_level or 0, msg_id=answer.msg_id or "")
