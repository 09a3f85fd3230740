"""Internal writes for the retry service (cluster-internal, not for clients;
docs/contracts.md): create `%RETRY%`/`%DLQ%` topics, and copy stored messages into other topics
(send-back R3-R8, dead-lettering R6, DLQ resend R16) without the body crossing the wire."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from clepsydra_core import validation
from clepsydra_core.errors import ClepsydraError, ValidationError
from clepsydra_store.api.context import ctx
from clepsydra_store.api.observability import BATCH_COUNT, set_attribute
from clepsydra_store.api.produce import MAX_BATCH, FlushTimeout, result_json
from clepsydra_store.api.topics import create
from clepsydra_store.api.web import json_response, request_object, trace_topic
from clepsydra_store.engine.types import CopyRequest, PutStatus, RangeCopyRequest
from clepsydra_web import jsonio

bp = Blueprint("internal", __name__)

COPY_FIELDS = frozenset({"items"})
RANGE_FIELDS = frozenset({"topic", "queueId", "fromOffset", "max", "target", "delayLevel",
                          "reconsumeTimes", "removeProperties"})
ITEM_FIELDS = frozenset({"commitLogOffset", "topic", "queueId", "delayLevel", "reconsumeTimes",
                         "setProperties", "removeProperties"})


@bp.post("/v1/internal/topics")
def create_system_topic() -> Response:
    return create(ctx(), system=True)


def _remove_properties(body: dict[str, Any]) -> tuple[str, ...]:
    remove = body.get("removeProperties") or []
    if not isinstance(remove, list) or not all(isinstance(n, str) for n in remove):
        raise ValidationError("removeProperties must be an array of strings",
                              code="INVALID_REQUEST")
    return tuple(remove)


def _copy_request(item: object) -> CopyRequest:
    if not isinstance(item, dict):
        raise ValidationError(f"an item must be a JSON object, got {jsonio.type_name(item)}",
                              code="INVALID_REQUEST")
    jsonio.check_fields(item, ITEM_FIELDS, "copy item")
    topic = validation.validate_topic_name(jsonio.req_str(item, "topic"))
    remove = _remove_properties(item)
    level = jsonio.opt_int(item, "delayLevel", 0, minimum=0, maximum=jsonio.INT32_MAX)
    return CopyRequest(
        commitlog_offset=jsonio.req_int(item, "commitLogOffset"),
        topic=topic,
        queue_id=jsonio.opt_int(item, "queueId", maximum=jsonio.INT32_MAX),
        delay_level=level or 0,
        reconsume_times=jsonio.opt_int(item, "reconsumeTimes", maximum=jsonio.INT32_MAX),
        set_properties=dict(validation.validate_properties(
            jsonio.str_map(item.get("setProperties"), "setProperties"), allow_reserved=True)),
        remove_properties=remove,
    )


@bp.post("/v1/internal/copy")
def copy() -> Response:
    """201 ``{results: [<produce result>]}``; all items checked before any is written."""
    c = ctx()
    c.require_writable()
    body = request_object()
    jsonio.check_fields(body, COPY_FIELDS, "copy")
    items = body.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ValidationError(f"items must be an array of 1 to {MAX_BATCH} objects",
                              code="INVALID_REQUEST")
    requests = []
    for index, item in enumerate(items):
        try:
            requests.append(_copy_request(item))
        except ClepsydraError as exc:
            exc.message = f"items[{index}]: {exc.message}"
            exc.args = (exc.message,)
            raise
    trace_topic(requests[0].topic)
    set_attribute(BATCH_COUNT, len(requests))
    results = c.store.copy(requests)
    out: list[dict[str, Any]] = [result_json(r) for r in results]
    if any(r.status is not PutStatus.OK for r in results):
        raise FlushTimeout(f"{len(results)} copied message(s) not flushed to disk in time", out)
    return json_response({"results": out}, 201)


@bp.post("/v1/internal/copy-range")
def copy_range() -> Response:
    """201 ``{copied, copiedMsgIds, skipped: [{queueOffset, msgId, reason}], nextOffset,
    lastCommitLogOffset}``: queue offsets ``[fromOffset, fromOffset+max)`` of ``topic``/
    ``queueId`` copied to ``target`` (a topic, or ``"origin"``: each message's RETRY_TOPIC)
    with one write; the DLQ "resend all" of R16 without shipping the messages."""
    c = ctx()
    c.require_writable()
    body = request_object()
    jsonio.check_fields(body, RANGE_FIELDS, "copy-range")
    topic = validation.validate_topic_name(jsonio.req_str(body, "topic"))
    target = jsonio.req_str(body, "target")
    req = RangeCopyRequest(
        topic=topic,
        queue_id=jsonio.req_int(body, "queueId", maximum=jsonio.INT32_MAX),
        from_offset=jsonio.req_int(body, "fromOffset"),
        max_count=jsonio.opt_int(body, "max", MAX_BATCH, minimum=1,
                                 maximum=MAX_BATCH) or MAX_BATCH,
        target_topic=None if target == "origin" else validation.validate_topic_name(target),
        delay_level=jsonio.opt_int(body, "delayLevel", 0, minimum=0,
                                   maximum=jsonio.INT32_MAX) or 0,
        reconsume_times=jsonio.opt_int(body, "reconsumeTimes", maximum=jsonio.INT32_MAX),
        remove_properties=_remove_properties(body),
    )
    trace_topic(topic)
    r = c.store.copy_range(req)
    set_attribute(BATCH_COUNT, len(r.results))
    out = {"copied": len(r.copied_msg_ids), "copiedMsgIds": r.copied_msg_ids,
           "skipped": [{"queueOffset": q, "msgId": m, "reason": why} for q, m, why in r.skipped],
           "nextOffset": r.next_offset, "lastCommitLogOffset": r.last_commitlog_offset}
    if any(x.status is not PutStatus.OK for x in r.results):
        raise FlushTimeout(f"{len(r.results)} copied message(s) not flushed to disk in time",
                           [result_json(x) for x in r.results])
    return json_response(out, 201)
