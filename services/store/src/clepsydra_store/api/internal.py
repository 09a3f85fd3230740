"""Internal writes for the retry service (cluster-internal, not for clients;
docs/contracts.md): create `%RETRY%`/`%DLQ%` topics, and copy stored messages into other topics
(send-back R3-R8, dead-lettering R6, DLQ resend R16) without the body crossing the wire."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from clepsydra_core import properties as P
from clepsydra_core import validation
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.copy import CopyBatch, CopyItem, RangeCopy
from clepsydra_store.api.answers import copy_request, range_copy_answer, range_copy_request
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.observability import BATCH_COUNT, set_attribute
from clepsydra_store.api.produce import FlushTimeout, result_json
from clepsydra_store.api.topics import create
from clepsydra_store.engine.types import PutResult, PutStatus
from clepsydra_web.tracing import parent_context


def create_system_topic(c: StoreContext, call: Call) -> Reply:
    return create(c, call, system=True)


def _checked(item: CopyItem) -> CopyItem:
    """The rules beyond the item's shape: a valid topic name, storable properties (P1)."""
    validation.validate_topic_name(item.topic)
    validation.validate_properties(item.set_properties, allow_reserved=True)
    validation.validate_properties(item.append_properties, allow_reserved=True)
    return item


def copy(c: StoreContext, call: Call) -> Reply:
    """201 ``{results: [<produce result>]}``; all items checked before any is written."""
    c.require_accepting()
    batch = CopyBatch.from_json(call.json(), what="copy", strict=True)
    requests: list[CopyItem] = []
    for index, item in enumerate(batch.items):
        try:
            requests.append(_checked(item))
        except ClepsydraError as exc:
            exc.message = f"items[{index}]: {exc.message}"
            exc.args = (exc.message,)
            raise
    spans = _copy_spans(c.obs.tracer, call, requests)
    try:
        results = c.store.copy([copy_request(item) for item in requests])
    except BaseException:
        for span in spans:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.end()
        raise
    _end_copy_spans(spans, requests, results)
    out: list[dict[str, Any]] = [result_json(r) for r in results]
    if any(r.status is not PutStatus.OK for r in results):
        raise FlushTimeout(f"{len(results)} copied message(s) not flushed to disk in time", out)
    return 201, {"results": out}


def _copy_spans(tracer: trace.Tracer, call: Call, items: list[CopyItem]) -> list[trace.Span]:
    """One ``store.copy`` span per copied message (the request itself makes none): a child of
    the context the retry service wrote into the copy's properties (its ``retry.send_back``
    span), else of the request's ``traceparent`` header - so a batch of send-backs from
    several traces puts each copy into its own message's trace (SPEC O1)."""
    if not telemetry.exporting():
        return []
    header = parent_context(call.environ)
    spans = []
    for item in items:
        carried = item.set_properties.get(P.TRACEPARENT)
        parent = telemetry.extract(item.set_properties) if carried else header
        attributes: dict[str, str | int] = {
            telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM,
            telemetry.OPERATION_TYPE: telemetry.SEND, telemetry.DESTINATION: item.topic}
        if item.reconsume_times is not None:
            attributes[telemetry.RECONSUME_TIMES] = item.reconsume_times
        if item.delay_level:
            attributes[telemetry.DELAY_LEVEL] = item.delay_level
        reason = item.set_properties.get(P.DLQ_REASON)
        if reason:
            attributes[telemetry.DLQ_REASON] = reason
        spans.append(tracer.start_span("store.copy", context=parent,
                                       kind=trace.SpanKind.SERVER, attributes=attributes))
    return spans


def _end_copy_spans(spans: list[trace.Span], items: list[CopyItem],
                    results: list[PutResult]) -> None:
    for span, item, result in zip(spans, items, results, strict=False):
        span.set_attribute(telemetry.MESSAGE_ID, result.msg_id)
        if result.topic != item.topic:  # parked in the schedule topic, or rerouted (R10)
            span.set_attribute(telemetry.STORED_TOPIC, result.topic)
        span.end()


def copy_range(c: StoreContext, call: Call) -> Reply:
    """201 :class:`RangeCopyAnswer`: queue offsets ``[fromOffset, fromOffset+max)`` of
    ``topic``/``queueId`` copied to ``target`` (a topic, or ``"origin"``: each message's
    RETRY_TOPIC) with one write; the DLQ "resend all" of R16 without shipping the messages."""
    c.require_accepting()
    req = RangeCopy.from_json(call.json(), what="copy-range", strict=True)
    validation.validate_topic_name(req.topic)
    if req.target_topic is not None:
        validation.validate_topic_name(req.target_topic)
    trace_topic(req.topic)
    r = c.store.copy_range(range_copy_request(req))
    set_attribute(BATCH_COUNT, len(r.results))
    if any(x.status is not PutStatus.OK for x in r.results):
        raise FlushTimeout(f"{len(r.results)} copied message(s) not flushed to disk in time",
                           [result_json(x) for x in r.results])
    return 201, range_copy_answer(r).to_json()
