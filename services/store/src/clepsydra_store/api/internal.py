"""Internal writes for the retry service (cluster-internal, not for clients;
docs/contracts.md): create `%RETRY%`/`%DLQ%` topics, and copy stored messages into other topics
(send-back R3-R8, dead-lettering R6, DLQ resend R16) without the body crossing the wire."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from clepsydra_core import validation
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.copy import CopyBatch, CopyItem, RangeCopy
from clepsydra_store.api.context import ctx
from clepsydra_store.api.observability import BATCH_COUNT, set_attribute
from clepsydra_store.api.produce import FlushTimeout, result_json
from clepsydra_store.api.topics import create
from clepsydra_store.api.web import json_response, request_object, trace_topic
from clepsydra_store.engine.types import PutStatus

bp = Blueprint("internal", __name__)


@bp.post("/v1/internal/topics")
def create_system_topic() -> Response:
    return create(ctx(), system=True)


def _checked(item: CopyItem) -> CopyItem:
    """The rules beyond the item's shape: a valid topic name, storable properties (P1)."""
    validation.validate_topic_name(item.topic)
    validation.validate_properties(item.set_properties, allow_reserved=True)
    return item


@bp.post("/v1/internal/copy")
def copy() -> Response:
    """201 ``{results: [<produce result>]}``; all items checked before any is written."""
    c = ctx()
    c.require_writable()
    batch = CopyBatch.from_json(request_object(), what="copy", strict=True)
    requests: list[CopyItem] = []
    for index, item in enumerate(batch.items):
        try:
            requests.append(_checked(item))
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
    """201 :class:`RangeCopyAnswer`: queue offsets ``[fromOffset, fromOffset+max)`` of
    ``topic``/``queueId`` copied to ``target`` (a topic, or ``"origin"``: each message's
    RETRY_TOPIC) with one write; the DLQ "resend all" of R16 without shipping the messages."""
    c = ctx()
    c.require_writable()
    req = RangeCopy.from_json(request_object(), what="copy-range", strict=True)
    validation.validate_topic_name(req.topic)
    if req.target_topic is not None:
        validation.validate_topic_name(req.target_topic)
    trace_topic(req.topic)
    r = c.store.copy_range(req)
    set_attribute(BATCH_COUNT, len(r.results))
    if any(x.status is not PutStatus.OK for x in r.results):
        raise FlushTimeout(f"{len(r.results)} copied message(s) not flushed to disk in time",
                           [result_json(x) for x in r.results])
    return json_response(r.to_json(), 201)
