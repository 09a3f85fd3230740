"""``apache.rocketmq.v2.MessagingService``: every RPC the official RocketMQ 5 clients call,
answered over Clepsydra (README of the service: the compatibility table). Each RPC is one span
``gateway.<rpc>``, one line in the metrics, and answers the protocol's status: a request it
refuses writes nothing and the gateway stays up. The RPCs it does not serve answer
``NOT_IMPLEMENTED`` naming themselves.
"""

from __future__ import annotations

import base64
import gzip
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from opentelemetry import trace

from clepsydra_core import properties as P
from clepsydra_core.auth import Action, Principal
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.http import Json
from clepsydra_gateway.access import Access
from clepsydra_gateway.backend import Backend
from clepsydra_gateway.consume import CLIENT_TTL_S, Consumption, Handed, ReceiveAsk, now_ms
from clepsydra_gateway.mapping import (
    GatewayError,
    RecallHandle,
    Status,
    backoff_s,
    check_digest,
    crc32_hex,
    max_attempts,
    ms_of,
    queue_of_group,
    status_of,
    user_properties,
    wire_topic,
)
from clepsydra_gateway.metrics import GatewayMetrics
from clepsydra_gateway.protocol import definition_pb2 as d
from clepsydra_gateway.protocol import service_pb2 as s
from clepsydra_gateway.protocol import service_pb2_grpc
from clepsydra_gateway.settings import MAX_INVISIBLE_S, MAX_LONG_POLL_S, GatewaySettings

logger = logging.getLogger(__name__)
_tracer = telemetry.tracer("clepsydra_gateway")

BROKER_NAME = "clepsydra"
"""The broker name every route gives (one endpoint: the gateway itself)."""
ACCEPTED_TYPES = (d.MessageType.NORMAL, d.MessageType.FIFO, d.MessageType.DELAY)
SEND_ATTEMPTS = 3
"""A producer's attempts per send (the client's own default), told in its Settings."""
RECEIVE_BATCH = 32
DEADLINE_MARGIN_S = 0.3
"""A send answers this long before the client's deadline: an error the client tries again
rather than a deadline it gives up on."""
MAX_BATCH = 1000
FILTER_TAG = d.FilterType.TAG
FILTER_SQL = d.FilterType.SQL

R = TypeVar("R")


def _ts(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _status(code: Status, message: str = "OK") -> Any:
    return d.Status(code=int(code), message=message)


def _ok() -> Any:
    return _status(Status.OK)


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, settings: GatewaySettings, backend: Backend, consumption: Consumption,
                 access: Access, metrics: GatewayMetrics) -> None:
        self.settings = settings
        self.backend = backend
        self.consumption = consumption
        self.access = access
        self.metrics = metrics
        self._seen: dict[str, float] = {}
        self._seen_lock = threading.Lock()

    # ---- the frame of every RPC --------------------------------------------------------

    def _call(self, rpc: str, context: grpc.ServicerContext, response: Callable[..., R],
              work: Callable[[Principal | None, str | None, dict[str, str]], R]) -> R:
        started = time.perf_counter()
        code = Status.OK
        with _tracer.start_as_current_span(f"gateway.{rpc}", kind=trace.SpanKind.SERVER,
                                           attributes={telemetry.MESSAGING_SYSTEM:
                                                       telemetry.SYSTEM,
                                                       telemetry.OPERATION_NAME: rpc}) as span:
            try:
                metadata = {k: v for k, v in context.invocation_metadata()
                            if isinstance(v, str)}
                self._client_seen(metadata.get("x-mq-client-id", ""))
                principal, token = self.access.who(metadata)
                return work(principal, token, metadata)
            except GatewayError as exc:
                code = exc.status
                return response(status=_status(exc.status, exc.message))
            except ClepsydraError as exc:
                code = status_of(exc)
                return response(status=_status(code, exc.message))
            except Exception as exc:
                code = Status.INTERNAL_ERROR
                logger.exception("gateway %s failed", rpc)
                return response(status=_status(code, f"{rpc} failed: {type(exc).__name__}"))
            finally:
                span.set_attribute(telemetry.RESULT, code.name)
                self.metrics.rpcs.labels(rpc, code.name).inc()
                self.metrics.seconds.labels(rpc).observe(time.perf_counter() - started)

    def _client_seen(self, client_id: str) -> None:
        """Mark a client alive (its PushConsumer's messages are renewed while it is), at most
        every few seconds per client."""
        if not client_id:
            return
        now = time.monotonic()
        with self._seen_lock:
            if self._seen.get(client_id, 0.0) > now:
                return
            self._seen[client_id] = now + CLIENT_TTL_S / 6
            if len(self._seen) > 100_000:
                self._seen = {}
        self.consumption.state.client_seen(client_id, CLIENT_TTL_S)

    # ---- routes and sessions -----------------------------------------------------------

    def QueryRoute(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, _md: dict[str, str]) -> Any:
            topic = request.topic.name
            self.access.check(who, Action.TOPIC_READ, None)
            info = self.backend.topic(topic, token)
            if info is None:
                raise GatewayError(Status.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            return s.QueryRouteResponse(status=_ok(), message_queues=[
                self._queue(request.topic, q, request.endpoints) for q in range(info.queues)])
        return self._call("QueryRoute", context, s.QueryRouteResponse, work)

    def _queue(self, topic: Any, queue_id: int, endpoints: Any) -> Any:
        if not endpoints.addresses:
            endpoints = d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[
                d.Address(host=self.settings.bind, port=self.settings.port)])
        return d.MessageQueue(topic=topic, id=queue_id, permission=d.Permission.READ_WRITE,
                              broker=d.Broker(name=BROKER_NAME, id=0, endpoints=endpoints),
                              accept_message_types=ACCEPTED_TYPES)

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, _t: str | None, _md: dict[str, str]) -> Any:
            if request.HasField("group") and request.group.name:
                self.access.check(who, Action.GROUP_CONSUME, request.group.name)
            return s.HeartbeatResponse(status=_ok())
        return self._call("Heartbeat", context, s.HeartbeatResponse, work)

    def NotifyClientTermination(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(_w: Principal | None, _t: str | None, md: dict[str, str]) -> Any:
            client_id = md.get("x-mq-client-id", "")
            if client_id:
                self.consumption.state.client_gone(client_id)
                with self._seen_lock:
                    self._seen.pop(client_id, None)
            return s.NotifyClientTerminationResponse(status=_ok())
        return self._call("NotifyClientTermination", context,
                          s.NotifyClientTerminationResponse, work)

    def Telemetry(self, request_iterator: Iterator[Any],
                  context: grpc.ServicerContext) -> Iterator[Any]:
        """The settings exchange: each Settings a client sends is answered with the
        gateway's (never its own metric block echoed back: the client then stops reading
        later settings)."""
        for command in request_iterator:
            if not command.HasField("settings"):
                continue
            theirs = command.settings

            def answer(who: Principal | None, token: str | None, _md: dict[str, str],
                       theirs: Any = theirs) -> Any:
                return s.TelemetryCommand(status=_ok(),
                                          settings=self._settings(theirs, who, token))

            yield self._call("Telemetry", context, s.TelemetryCommand, answer)

    def _settings(self, theirs: Any, who: Principal | None, token: str | None) -> Any:
        ours = d.Settings(client_type=theirs.client_type, access_point=theirs.access_point,
                          request_timeout=theirs.request_timeout, metric=d.Metric(on=False))
        kind = theirs.WhichOneof("pub_sub")
        if kind == "subscription":
            group = theirs.subscription.group.name
            self.access.check(who, Action.GROUP_CONSUME, group)
            retry_max = self.backend.group_settings(group, token).retry_max_times
            ours.subscription.group.CopyFrom(theirs.subscription.group)
            ours.subscription.subscriptions.extend(theirs.subscription.subscriptions)
            ours.subscription.fifo = self.consumption.is_fifo(group)
            ours.subscription.receive_batch_size = RECEIVE_BATCH
            ours.subscription.long_polling_timeout.CopyFrom(
                duration_pb2.Duration(seconds=int(self.settings.long_poll_s)))
            ours.backoff_policy.max_attempts = max_attempts(retry_max)
            ours.backoff_policy.customized_backoff.next.extend(
                duration_pb2.Duration(seconds=step)
                for step in backoff_s(self.settings.delay_levels, retry_max))
        else:
            ours.publishing.topics.extend(theirs.publishing.topics)
            ours.publishing.max_body_size = self.settings.max_body_bytes
            ours.publishing.validate_message_type = True
            ours.backoff_policy.max_attempts = SEND_ATTEMPTS
            backoff = ours.backoff_policy.exponential_backoff
            backoff.initial.CopyFrom(duration_pb2.Duration(seconds=1))
            backoff.max.CopyFrom(duration_pb2.Duration(seconds=10))
            backoff.multiplier = 2.0
        return ours

    # ---- producing ---------------------------------------------------------------------

    def SendMessage(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, _md: dict[str, str]) -> Any:
            if not request.messages:
                raise GatewayError(Status.BAD_REQUEST, "a send needs at least one message")
            topic = request.messages[0].topic.name
            if any(m.topic.name != topic for m in request.messages):
                raise GatewayError(Status.BAD_REQUEST, "the messages of one send must share "
                                                       "their topic")
            self.access.check(who, Action.SEND, topic)
            trace.get_current_span().set_attribute(telemetry.DESTINATION, topic)
            placed = [self._store_message(m, topic, token) for m in request.messages]
            left = context.time_remaining()
            within_s = None if left is None else left - DEADLINE_MARGIN_S
            answers = self._produce(topic, placed, token, within_s)
            self.metrics.messages.labels("sent").inc(len(answers))
            self.consumption.wake()
            return s.SendMessageResponse(status=_ok(), entries=[
                s.SendResultEntry(status=_ok(), message_id=a["msgId"],
                                  offset=int(a.get("queueOffset", 0)),
                                  recall_handle=(RecallHandle(topic, a["msgId"], shard).encode()
                                                 if m.system_properties.HasField(
                                                     "delivery_timestamp") else ""))
                for m, (a, shard) in zip(request.messages, answers, strict=True)])
        return self._call("SendMessage", context, s.SendMessageResponse, work)

    def _produce(self, topic: str, placed: list[tuple[dict[str, Any], int | None]],
                 token: str | None, within_s: float | None) -> list[tuple[Json, int]]:
        """Store the messages of one send: (each one's answer, its shard), in order. Those of
        one shard (or all plain ones, placed together by the cluster) go as one batch, all or
        none; a FIFO send whose message groups fall on several shards is one batch per shard
        (DEC-store-shards)."""
        if len(placed) == 1:
            body, shard = placed[0]
            answer, stored_on = self.backend.produce(topic, body, token, within_s, shard)
            return [(answer, stored_on)]
        by_shard: dict[int | None, list[int]] = {}
        for i, (_, shard) in enumerate(placed):
            by_shard.setdefault(shard, []).append(i)
        out: list[tuple[Json, int] | None] = [None] * len(placed)
        for shard, indexes in by_shard.items():
            answers, stored_on = self.backend.produce_batch(
                topic, [placed[i][0] for i in indexes], token, within_s, shard)
            for i, answer in zip(indexes, answers, strict=True):
                out[i] = (answer, stored_on)
        return [a for a in out if a is not None]

    def _store_message(self, message: Any, topic: str,
                       token: str | None) -> tuple[dict[str, Any], int | None]:
        """A protocol message as the store's produce takes it (nothing is sent yet), and the
        store shard it must go to (None: any, a plain send)."""
        sp = message.system_properties
        if sp.message_type == d.MessageType.TRANSACTION:
            raise GatewayError(Status.UNSUPPORTED, "transactional messages are not supported "
                                                   "by Clepsydra")
        if sp.HasField("lite_topic") or sp.HasField("priority"):
            raise GatewayError(Status.UNSUPPORTED, "lite topics and priorities are not "
                                                   "supported by Clepsydra")
        body = message.body
        if sp.body_encoding == d.Encoding.GZIP:
            try:
                body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else zlib.decompress(body)
            except (OSError, zlib.error) as exc:
                raise GatewayError(Status.MESSAGE_CORRUPTED,
                                   f"the body is not gzip or deflate: {exc}") from None
        if not body:
            raise GatewayError(Status.MESSAGE_BODY_EMPTY, "the message body is empty")
        if len(body) > self.settings.max_body_bytes:
            raise GatewayError(Status.MESSAGE_BODY_TOO_LARGE,
                               f"the body is {len(body)} bytes, at most "
                               f"{self.settings.max_body_bytes} (SPEC P1)")
        if sp.HasField("body_digest"):
            check_digest(sp.body_digest.type, sp.body_digest.checksum, message.body)
        props = dict(message.user_properties)
        if sp.message_id:
            props[P.UNIQ_KEY] = sp.message_id  # the message's Clepsydra msgId (DEC-gateway-ids)
        out: dict[str, Any] = {"bodyBase64": base64.b64encode(body).decode("ascii")}
        shard: int | None = None
        if sp.HasField("message_group") and sp.message_group:
            props[P.SHARDING_KEY] = sp.message_group
            info = self.backend.topic(topic, token)
            if info is None:
                raise GatewayError(Status.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            # the group's queue among every shard's (its index in the global list)
            shard, out["queueId"] = self.backend.place(
                topic, queue_of_group(sp.message_group, info.queues), token)
        telemetry.inject(props)
        out["properties"] = props
        if sp.tag:
            out["tags"] = sp.tag
        if sp.keys:
            out["keys"] = list(sp.keys)
        if sp.HasField("born_timestamp") and sp.born_timestamp.seconds > 0:
            out["bornTimestamp"] = ms_of(sp.born_timestamp.seconds, sp.born_timestamp.nanos)
        if sp.HasField("delivery_timestamp"):
            out["deliverAt"] = ms_of(sp.delivery_timestamp.seconds,
                                     sp.delivery_timestamp.nanos)
        return out, shard

    def RecallMessage(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, _md: dict[str, str]) -> Any:
            handle = RecallHandle.decode(request.recall_handle)
            if handle.topic != request.topic.name:
                raise GatewayError(Status.BAD_REQUEST, f"the recall handle is of topic "
                                                       f"{handle.topic}, not "
                                                       f"{request.topic.name}")
            self.access.check(who, Action.SEND, handle.topic)
            try:
                self.backend.cancel(handle.msg_id, handle.shard, token)
            except ClepsydraError as exc:
                if status_of(exc) == Status.NOT_FOUND:
                    raise GatewayError(Status.NOT_FOUND, f"message {handle.msg_id} was not "
                                       f"recalled: already delivered, or not a pending "
                                       f"scheduled message ({exc.message})") from None
                raise
            return s.RecallMessageResponse(status=_ok(), message_id=handle.msg_id)
        return self._call("RecallMessage", context, s.RecallMessageResponse, work)

    # ---- consuming ---------------------------------------------------------------------

    def QueryAssignment(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, _md: dict[str, str]) -> Any:
            self._consume_check(who, request.group.name, request.topic.name)
            if self.backend.topic(request.topic.name, token) is None:
                raise GatewayError(Status.TOPIC_NOT_FOUND,
                                   f"topic {request.topic.name} does not exist")
            # One assignment: one receive of it looks at every queue of the topic.
            return s.QueryAssignmentResponse(status=_ok(), assignments=[
                d.Assignment(message_queue=self._queue(request.topic, 0, request.endpoints))])
        return self._call("QueryAssignment", context, s.QueryAssignmentResponse, work)

    def _consume_check(self, who: Principal | None, group: str, topic: str) -> None:
        if not group:
            raise GatewayError(Status.ILLEGAL_CONSUMER_GROUP, "a consumer group is required")
        self.access.check(who, Action.PULL, topic)
        self.access.check(who, Action.GROUP_CONSUME, group)

    def ReceiveMessage(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        handed: list[Handed] = []

        def work(who: Principal | None, token: str | None, md: dict[str, str]) -> Any:
            group, topic = request.group.name, request.message_queue.topic.name
            self._consume_check(who, group, topic)
            ask = ReceiveAsk(group=group, topic=topic, tags=self._tags(request),
                             batch=self._batch(request.batch_size),
                             invisible_ms=self._invisible_ms(request),
                             auto_renew=request.auto_renew,
                             client_id=md.get("x-mq-client-id", ""),
                             wait_s=min(request.long_polling_timeout.seconds
                                        + request.long_polling_timeout.nanos / 1e9,
                                        MAX_LONG_POLL_S), token=token)
            span = trace.get_current_span()
            span.set_attribute(telemetry.DESTINATION, topic)
            span.set_attribute(telemetry.CONSUMER_GROUP, group)
            handed.extend(self.consumption.receive(ask, context.is_active))
            if not handed:
                telemetry.mark_idle(span)
                return s.ReceiveMessageResponse(status=_status(Status.MESSAGE_NOT_FOUND,
                                                               "no new message"))
            span.set_attribute(telemetry.BATCH_COUNT, len(handed))
            self.metrics.messages.labels("received").inc(len(handed))
            return s.ReceiveMessageResponse(status=_ok())

        final = self._call("ReceiveMessage", context, s.ReceiveMessageResponse, work)
        if handed:
            yield s.ReceiveMessageResponse(delivery_timestamp=_ts(now_ms()))
            namespace = request.message_queue.topic.resource_namespace
            for item in handed:
                yield s.ReceiveMessageResponse(message=self._wire(item, namespace))
        yield final

    @staticmethod
    def _tags(request: Any) -> str | None:
        expression = request.filter_expression
        if expression.type == FILTER_SQL:
            raise GatewayError(Status.ILLEGAL_FILTER_EXPRESSION,
                               "SQL92 filters are not supported: filter by tag")
        text = expression.expression.strip()
        return None if not text or text == "*" else text

    @staticmethod
    def _batch(size: int) -> int:
        if size <= 0:
            raise GatewayError(Status.BAD_REQUEST, f"batch_size must be above 0, got {size}")
        return min(size, MAX_BATCH)

    def _invisible_ms(self, request: Any) -> int:
        if not request.HasField("invisible_duration"):
            return self.settings.renew_s * 1000
        return self._checked_invisible(request.invisible_duration)

    def _checked_invisible(self, duration: Any) -> int:
        ms = int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000
        low = self.settings.min_invisible_s * 1000
        if not low <= ms <= MAX_INVISIBLE_S * 1000:
            raise GatewayError(Status.ILLEGAL_INVISIBLE_TIME,
                               f"invisible duration {ms} ms is outside {low} ms to "
                               f"{MAX_INVISIBLE_S} s")
        return ms

    def _wire(self, item: Handed, namespace: str) -> Any:
        m = item.message
        props: dict[str, str] = m.get("properties") or {}
        if m.get("bodyBase64") is not None:
            body = base64.b64decode(m["bodyBase64"])
        else:
            body = (m.get("body") or "").encode("utf-8")
        group = props.get(P.SHARDING_KEY)
        sp = d.SystemProperties(
            message_id=m["msgId"], body_digest=d.Digest(type=d.DigestType.CRC32,
                                                        checksum=crc32_hex(body)),
            body_encoding=d.Encoding.IDENTITY,
            message_type=(d.MessageType.FIFO if group else
                          d.MessageType.DELAY if P.DELIVER_TS in props or P.DELIVER_AT in props
                          else d.MessageType.NORMAL),
            born_timestamp=_ts(int(m.get("bornTimestamp", 0))),
            born_host=m.get("bornHost", ""), store_timestamp=_ts(int(m.get("storeTimestamp", 0))),
            store_host=m.get("storeHost", ""), receipt_handle=item.handle.encode(),
            queue_id=item.handle.queue_id, queue_offset=item.handle.queue_offset,
            invisible_duration=duration_pb2.Duration(seconds=item.invisible_ms // 1000,
                                                     nanos=(item.invisible_ms % 1000)
                                                     * 1_000_000),
            delivery_attempt=item.attempt)
        if m.get("tags"):
            sp.tag = m["tags"]
        keys = (m.get("keys") or "").split()
        if keys:
            sp.keys.extend(keys)
        if group:
            sp.message_group = group
        deliver_at = props.get(P.DELIVER_TS) or props.get(P.DELIVER_AT)
        if deliver_at and deliver_at.isdigit():
            sp.delivery_timestamp.CopyFrom(_ts(int(deliver_at)))
        if props.get(P.TRACEPARENT):
            sp.trace_context = props[P.TRACEPARENT]
        return d.Message(topic=d.Resource(name=wire_topic(m["topic"], props),
                                          resource_namespace=namespace),
                         user_properties=user_properties(props), system_properties=sp,
                         body=body)

    def AckMessage(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, _md: dict[str, str]) -> Any:
            self._consume_check(who, request.group.name, request.topic.name)
            results = []
            first_error: Any = None
            for entry in request.entries:
                try:
                    self.consumption.ack(request.group.name, entry.receipt_handle, token)
                    status = _ok()
                    self.metrics.messages.labels("acked").inc()
                except GatewayError as exc:
                    status = _status(exc.status, exc.message)
                except ClepsydraError as exc:
                    status = _status(status_of(exc), exc.message)
                first_error = first_error or (status if status.code != Status.OK else None)
                results.append(s.AckMessageResultEntry(message_id=entry.message_id,
                                                       receipt_handle=entry.receipt_handle,
                                                       status=status))
            return s.AckMessageResponse(status=first_error or _ok(), entries=results)
        return self._call("AckMessage", context, s.AckMessageResponse, work)

    def ChangeInvisibleDuration(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, _t: str | None, _md: dict[str, str]) -> Any:
            self._consume_check(who, request.group.name, request.topic.name)
            invisible_ms = self._checked_invisible(request.invisible_duration)
            handle = self.consumption.change_invisible(request.group.name,
                                                       request.receipt_handle, invisible_ms)
            return s.ChangeInvisibleDurationResponse(status=_ok(), receipt_handle=handle)
        return self._call("ChangeInvisibleDuration", context,
                          s.ChangeInvisibleDurationResponse, work)

    def ForwardMessageToDeadLetterQueue(self, request: Any,
                                        context: grpc.ServicerContext) -> Any:
        def work(who: Principal | None, token: str | None, md: dict[str, str]) -> Any:
            self._consume_check(who, request.group.name, request.topic.name)
            self.consumption.forward_to_dlq(request.group.name, request.receipt_handle,
                                            md.get("x-mq-client-id", ""), token)
            return s.ForwardMessageToDeadLetterQueueResponse(status=_ok())
        return self._call("ForwardMessageToDeadLetterQueue", context,
                          s.ForwardMessageToDeadLetterQueueResponse, work)

    # ---- what is not served ------------------------------------------------------------

    def _not_implemented(self, rpc: str, context: grpc.ServicerContext,
                         response: Callable[..., R]) -> R:
        def work(_w: Principal | None, _t: str | None, _md: dict[str, str]) -> R:
            raise GatewayError(Status.NOT_IMPLEMENTED,
                               f"{rpc} is not implemented by the Clepsydra gateway")
        return self._call(rpc, context, response, work)

    def PullMessage(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        yield self._not_implemented("PullMessage", context, s.PullMessageResponse)

    def UpdateOffset(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._not_implemented("UpdateOffset", context, s.UpdateOffsetResponse)

    def GetOffset(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._not_implemented("GetOffset", context, s.GetOffsetResponse)

    def QueryOffset(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._not_implemented("QueryOffset", context, s.QueryOffsetResponse)

    def EndTransaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._not_implemented("EndTransaction", context, s.EndTransactionResponse)

    def SyncLiteSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._not_implemented("SyncLiteSubscription", context,
                                     s.SyncLiteSubscriptionResponse)
