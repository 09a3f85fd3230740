"""Internal writes for the retry service (cluster-internal, not for clients;
docs/contracts.md): create `%RETRY%`/`%DLQ%` topics, and copy stored messages into other topics
(send-back R3-R8, dead-lettering R6, DLQ resend R16) without the body crossing the wire."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from clepsydra_core import validation
from clepsydra_core.errors import ClepsydraError, ValidationError
from clepsydra_store.api import jsonio
from clepsydra_store.api.context import ctx
from clepsydra_store.api.observability import BATCH_COUNT, set_attribute
from clepsydra_store.api.produce import MAX_BATCH, FlushTimeout, result_json
from clepsydra_store.api.topics import create
from clepsydra_store.api.web import json_response, request_object, trace_topic
from clepsydra_store.engine.types import CopyRequest, PutStatus

bp = Blueprint("internal", __name__)

COPY_FIELDS = frozenset({"items"})
ITEM_FIELDS = frozenset({"commitLogOffset", "topic", "queueId", "delayLevel", "reconsumeTimes",
                         "setProperties", "removeProperties"})


@bp.post("/v1/internal/topics")
def create_system_topic() -> Response:
    return create(ctx(), system=True)


def _copy_request(item: object) -> CopyRequest:
    if not isinstance(item, dict):
        raise ValidationError(f"an item must be a JSON object, got {jsonio.type_name(item)}",
                              code="INVALID_REQUEST")
    jsonio.check_fields(item, ITEM_FIELDS, "copy item")
    topic = validation.validate_topic_name(jsonio.req_str(item, "topic"))
    remove = item.get("removeProperties") or []
    if not isinstance(remove, list) or not all(isinstance(n, str) for n in remove):
        raise ValidationError("removeProperties must be an array of strings",
                              code="INVALID_REQUEST")
    level = jsonio.opt_int(item, "delayLevel", 0, minimum=0, maximum=jsonio.INT32_MAX)
    return CopyRequest(
        commitlog_offset=jsonio.req_int(item, "commitLogOffset"),
        topic=topic,
        queue_id=jsonio.opt_int(item, "queueId", maximum=jsonio.INT32_MAX),
        delay_level=level or 0,
        reconsume_times=jsonio.opt_int(item, "reconsumeTimes", maximum=jsonio.INT32_MAX),
        set_properties=dict(validation.validate_properties(
            jsonio.str_map(item.get("setProperties"), "setProperties"), allow_reserved=True)),
        remove_properties=tuple(remove),
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
