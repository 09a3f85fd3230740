"""The store's orderly queue locks (SPEC R12, DEC-orderly-queue-locks;
RocketMQ's lockBatchMQ / unlockBatchMQ):

- ``POST /v1/groups/{group}/locks`` :class:`LockRequest` -> :class:`LockAnswer` (the queues
  the client now holds; the others are held by another client whose lock has not expired)
- ``POST /v1/groups/{group}/locks/unlock`` :class:`LockRequest` -> :class:`UnlockAnswer`
- ``GET /v1/groups/{group}/locks`` -> :class:`LockList`
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import INT32_MAX, WireValue, wire_meta
from clepsydra_core.wire.groups import ANY_TEXT, MAX_CLIENT_ID
from clepsydra_core.wire.topics import topic_meta

MAX_LOCK_QUEUES = 1000
"""Queues one lock or unlock request may name."""


@dataclass(frozen=True, slots=True)
class QueueRef(WireValue):
    topic: str = field(metadata=topic_meta())
    queue_id: int = field(metadata=wire_meta(minimum=0, maximum=INT32_MAX))


@dataclass(frozen=True, slots=True)
class LockRequest(WireValue):
    client_id: str = field(metadata=wire_meta(
        pattern=ANY_TEXT, max_length=MAX_CLIENT_ID, doc="the consumer's client id (as in its "
        "heartbeat)"))
    queues: list[QueueRef] = field(metadata=wire_meta(max_items=MAX_LOCK_QUEUES))


@dataclass(frozen=True, slots=True)
class LockAnswer(WireValue):
    locked: list[QueueRef]
    expiry_ms: int = field(metadata=wire_meta(
        doc="how long a lock lasts unless renewed (CLEPSYDRA_STORE_LOCK_EXPIRY_S)"))


@dataclass(frozen=True, slots=True)
class UnlockAnswer(WireValue):
    unlocked: list[QueueRef]


@dataclass(frozen=True, slots=True)
class LockHolder(WireValue):
    topic: str
    queue_id: int
    client_id: str
    expires_at_ms: int = field(metadata=wire_meta(
        doc="when the lock expires unless renewed (epoch ms, the store's clock)"))


@dataclass(frozen=True, slots=True)
class LockList(WireValue):
    locks: list[LockHolder]
