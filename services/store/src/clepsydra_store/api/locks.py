"""Queue locks of orderly consumers (issue 12.5; RocketMQ's lockBatchMQ / unlockBatchMQ):

- ``POST /v1/groups/{group}/locks`` ``{clientId, queues: [{topic, queueId}]}`` locks or renews
  each queue for the client: ``{locked: [{topic, queueId}], expiryMs}`` (the queues it now
  holds; the others are held by another live consumer);
- ``POST /v1/groups/{group}/locks/unlock`` (same body) releases the client's ones:
  ``{unlocked: [{topic, queueId}]}``;
- ``GET /v1/groups/{group}/locks``: ``{locks: [{topic, queueId, clientId, expiresAtMs}]}``.

The table itself is :class:`clepsydra_store.queue_locks.QueueLocks`.
"""

from __future__ import annotations

from flask import Blueprint, Response

from clepsydra_core import validation
from clepsydra_core.wire.locks import (
    LockAnswer,
    LockHolder,
    LockList,
    LockRequest,
    QueueRef,
    UnlockAnswer,
)
from clepsydra_store.api.context import ctx
from clepsydra_store.api.web import json_response, request_object
from clepsydra_store.queue_locks import QueueKey

bp = Blueprint("locks", __name__)


def _request() -> tuple[str, list[QueueKey]]:
    asked = LockRequest.from_json(request_object(), what="lock request", strict=True)
    queues: list[QueueKey] = []
    for ref in asked.queues:
        topic = validation.validate_topic_name(ref.topic)
        validation.check_consumable(topic)
        queues.append((topic, ref.queue_id))
    return asked.client_id, queues


def _refs(queues: list[QueueKey]) -> list[QueueRef]:
    return [QueueRef(topic, queue_id) for topic, queue_id in queues]


@bp.post("/v1/groups/<group>/locks")
def lock_queues(group: str) -> Response:
    validation.validate_group_name(group)
    client_id, queues = _request()
    locks = ctx().locks
    locked = locks.lock(group, client_id, queues)
    return json_response(LockAnswer(_refs(locked), locks.expiry_ms).to_json())


@bp.post("/v1/groups/<group>/locks/unlock")
def unlock_queues(group: str) -> Response:
    validation.validate_group_name(group)
    client_id, queues = _request()
    return json_response(UnlockAnswer(_refs(ctx().locks.unlock(group, client_id,
                                                                queues))).to_json())


@bp.get("/v1/groups/<group>/locks")
def list_locks(group: str) -> Response:
    validation.validate_group_name(group)
    return json_response(LockList([
        LockHolder(h.topic, h.queue_id, h.client_id, h.expires_at_ms)
        for h in ctx().locks.holders(group)]).to_json())
