"""Queue locks of orderly consumers (issue 12.5; RocketMQ's lockBatchMQ / unlockBatchMQ):

- ``POST /v1/groups/{group}/locks`` ``{clientId, queues: [{topic, queueId}]}`` locks or renews
  each queue for the client: ``{locked: [{topic, queueId}], expiryMs}`` (the queues it now
  holds; the others are held by another live consumer);
- ``POST /v1/groups/{group}/locks/unlock`` (same body) releases the client's ones:
  ``{unlocked: [{topic, queueId}]}``;
- ``GET /v1/groups/{group}/locks``: ``{locks: [{topic, queueId, clientId, expiresAtMs}]}``.

The table itself is :class:`clepsydra_store.engine.queue_locks.QueueLocks`.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from clepsydra_core import validation
from clepsydra_core.errors import ValidationError
from clepsydra_store.api.context import ctx
from clepsydra_store.api.groups import MAX_CLIENT_ID
from clepsydra_store.api.web import json_response, request_object
from clepsydra_store.engine.queue_locks import QueueKey
from clepsydra_web import jsonio

bp = Blueprint("locks", __name__)

LOCK_FIELDS = frozenset({"clientId", "queues"})
QUEUE_FIELDS = frozenset({"topic", "queueId"})
MAX_LOCK_QUEUES = 1000
"""Queues one lock or unlock request may name."""


def _request() -> tuple[str, list[QueueKey]]:
    body = request_object()
    jsonio.check_fields(body, LOCK_FIELDS, "lock request")
    client_id = jsonio.req_str(body, "clientId")
    if not client_id or len(client_id) > MAX_CLIENT_ID:
        raise ValidationError(f"clientId must be 1 to {MAX_CLIENT_ID} characters",
                              code="INVALID_REQUEST")
    raw = body.get("queues")
    if not isinstance(raw, list):
        raise ValidationError("queues must be a list of {topic, queueId}",
                              code="INVALID_REQUEST")
    if len(raw) > MAX_LOCK_QUEUES:
        raise ValidationError(f"queues names {len(raw)} queues; at most {MAX_LOCK_QUEUES} "
                              "per request", code="INVALID_REQUEST")
    queues: list[QueueKey] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValidationError(f"queues[{index}] must be an object {{topic, queueId}}",
                                  code="INVALID_REQUEST")
        jsonio.check_fields(item, QUEUE_FIELDS, f"queues[{index}]")
        topic = validation.validate_topic_name(jsonio.req_str(item, "topic"))
        validation.check_consumable(topic)
        queues.append((topic, jsonio.req_int(item, "queueId", maximum=jsonio.INT32_MAX)))
    return client_id, queues


def _queues_json(queues: list[QueueKey]) -> list[dict[str, Any]]:
    return [{"topic": topic, "queueId": queue_id} for topic, queue_id in queues]


@bp.post("/v1/groups/<group>/locks")
def lock_queues(group: str) -> Response:
    validation.validate_group_name(group)
    client_id, queues = _request()
    locks = ctx().locks
    locked = locks.lock(group, client_id, queues)
    return json_response({"locked": _queues_json(locked), "expiryMs": locks.expiry_ms})


@bp.post("/v1/groups/<group>/locks/unlock")
def unlock_queues(group: str) -> Response:
    validation.validate_group_name(group)
    client_id, queues = _request()
    return json_response({"unlocked": _queues_json(ctx().locks.unlock(group, client_id,
                                                                       queues))})


@bp.get("/v1/groups/<group>/locks")
def list_locks(group: str) -> Response:
    validation.validate_group_name(group)
    return json_response({"locks": [
        {"topic": h.topic, "queueId": h.queue_id, "clientId": h.client_id,
         "expiresAtMs": h.expires_at_ms} for h in ctx().locks.holders(group)]})
