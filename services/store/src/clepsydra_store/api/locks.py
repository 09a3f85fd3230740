"""Queue locks of orderly consumers (RocketMQ's lockBatchMQ / unlockBatchMQ):

- ``POST /v1/groups/{group}/locks`` ``{clientId, queues: [{topic, queueId}]}`` locks or renews
  each queue for the client: ``{locked: [{topic, queueId}], expiryMs}`` (the queues it now
  holds; the others are held by another live consumer);
- ``POST /v1/groups/{group}/locks/unlock`` (same body) releases the client's ones:
  ``{unlocked: [{topic, queueId}]}``;
- ``GET /v1/groups/{group}/locks``: ``{locks: [{topic, queueId, clientId, expiresAtMs}]}``.

The table itself is :class:`clepsydra_store.queue_locks.QueueLocks`.
"""

from __future__ import annotations

from clepsydra_core import validation
from clepsydra_core.wire.locks import (
    LockAnswer,
    LockHolder,
    LockList,
    LockRequest,
    QueueRef,
    UnlockAnswer,
)
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply
from clepsydra_store.queue_locks import QueueKey


def _request(call: Call) -> tuple[str, list[QueueKey]]:
    asked = LockRequest.from_json(call.json(), what="lock request", strict=True)
    queues: list[QueueKey] = []
    for ref in asked.queues:
        topic = validation.validate_topic_name(ref.topic)
        validation.check_consumable(topic)
        queues.append((topic, ref.queue_id))
    return asked.client_id, queues


def _refs(queues: list[QueueKey]) -> list[QueueRef]:
    return [QueueRef(topic, queue_id) for topic, queue_id in queues]


def lock_queues(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    client_id, queues = _request(call)
    locked = c.locks.lock(group, client_id, queues)
    return 200, LockAnswer(_refs(locked), c.locks.expiry_ms).to_json()


def unlock_queues(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    client_id, queues = _request(call)
    return 200, UnlockAnswer(_refs(c.locks.unlock(group, client_id, queues))).to_json()


def list_locks(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    return 200, LockList([LockHolder(h.topic, h.queue_id, h.client_id, h.expires_at_ms)
                          for h in c.locks.holders(group)]).to_json()
