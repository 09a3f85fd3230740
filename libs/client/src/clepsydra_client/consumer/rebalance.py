"""Queue allocation strategies for clustering consumers (SPEC C1), after RocketMQ's
``AllocateMessageQueueStrategy`` family. Pure functions of their inputs: every consumer of a
group sorts the same queues and the same consumer ids and computes its own share, so the
shares never overlap and together cover every queue.

    strategy = AverageStrategy()
    mine = strategy.allocate("c2", queues, ["c1", "c2", "c3"])
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from clepsydra_client.message import MessageQueue
from clepsydra_core.errors import ConfigError

logger = logging.getLogger(__name__)


class AllocateStrategy(Protocol):
    """``allocate(current_id, queues, consumer_ids)`` -> the queues ``current_id`` owns."""

    name: str

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]: ...


def _prepare(current_id: str, queues: Iterable[MessageQueue],
             consumer_ids: Iterable[str]) -> tuple[list[MessageQueue], list[str], int] | None:
    """Sorted, de-duplicated inputs and the current consumer's index; None when it has no share
    (no queues, or it is not among the consumers — it may not have been registered yet)."""
    qs = sorted(set(queues))
    ids = sorted(set(consumer_ids))
    if not qs or current_id not in ids:
        if qs:
            logger.info("rebalance: consumer %s not in the group's consumer list %s yet",
                        current_id, ids)
        return None
    return qs, ids, ids.index(current_id)


class AverageStrategy:
    """Contiguous blocks: 8 queues over 3 consumers -> [0 1 2] [3 4 5] [6 7]
    (RocketMQ ``AllocateMessageQueueAveragely``, the default)."""

    name = "average"

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]:
        prepared = _prepare(current_id, queues, consumer_ids)
        if prepared is None:
            return []
        qs, ids, index = prepared
        n_q, n_c = len(qs), len(ids)
        mod = n_q % n_c
        size = 1 if n_q <= n_c else n_q // n_c + (1 if mod > 0 and index < mod else 0)
        start = index * size if mod > 0 and index < mod else index * size + mod
        count = min(size, n_q - start)
        return [qs[start + i] for i in range(max(count, 0))]


class AverageByCircleStrategy:
    """Round robin: 8 queues over 3 consumers -> [0 3 6] [1 4 7] [2 5]
    (RocketMQ ``AllocateMessageQueueAveragelyByCircle``)."""

    name = "average-by-circle"

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]:
        prepared = _prepare(current_id, queues, consumer_ids)
        if prepared is None:
            return []
        qs, ids, index = prepared
        return qs[index::len(ids)]


def md5_hash(key: str) -> int:
    """First 4 bytes of the MD5 digest, big-endian (RocketMQ ``ConsistentHashRouter.MD5Hash``)."""
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:4], "big")


DEFAULT_BROKER_NAME = "broker-a"
"""The broker name in a queue's RocketMQ form when none is configured (RocketMQ's sample
broker); set the same name as the RocketMQ brokers a mixed fleet shares queues with."""


def rocketmq_queue_key(queue: MessageQueue, broker_name: str) -> str:
    """A queue as RocketMQ's ``MessageQueue.toString()`` writes it: the key its consistent hash
    places on the ring."""
    return (f"MessageQueue [topic={queue.topic}, brokerName={broker_name}, "
            f"queueId={queue.queue_id}]")


class ConsistentHashStrategy:
    """Each queue goes to the consumer whose virtual node follows the queue's hash on a ring
    (RocketMQ ``AllocateMessageQueueConsistentHash``): when a consumer joins or leaves, only
    the queues next to its nodes move. The same ring as RocketMQ's (virtual nodes
    ``<clientId>-<i>``, MD5, a later node on an equal hash replacing the earlier one) and the
    same queue keys (:func:`rocketmq_queue_key` with ``broker_name``), so a mixed fleet agrees
    on ownership (C1)."""

    name = "consistent-hash"

    def __init__(self, virtual_nodes: int = 10, hash_fn: Callable[[str], int] = md5_hash,
                 broker_name: str = DEFAULT_BROKER_NAME) -> None:
        if virtual_nodes < 1:
            raise ConfigError(f"consistent hash needs at least 1 virtual node, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_fn = hash_fn
        self.broker_name = broker_name

    def ring(self, consumer_ids: Sequence[str]) -> tuple[list[int], list[str]]:
        nodes: dict[int, str] = {}
        for cid in consumer_ids:  # in order: a later node on an equal hash wins (a TreeMap)
            for i in range(self.virtual_nodes):
                nodes[self.hash_fn(f"{cid}-{i}")] = cid
        hashes = sorted(nodes)
        return hashes, [nodes[h] for h in hashes]

    def owner(self, queue: MessageQueue, hashes: list[int], owners: list[str]) -> str:
        h = self.hash_fn(rocketmq_queue_key(queue, self.broker_name))
        pos = bisect.bisect_left(hashes, h)
        return owners[pos % len(owners)]

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]:
        prepared = _prepare(current_id, queues, consumer_ids)
        if prepared is None:
            return []
        qs, ids, _ = prepared
        hashes, owners = self.ring(ids)
        return [q for q in qs if self.owner(q, hashes, owners) == current_id]


class ConfigStrategy:
    """The queues this consumer was configured with, as given, whatever the others do and
    whatever the topic holds now (RocketMQ ``AllocateMessageQueueByConfig``); the
    operator keeps the configurations of a group disjoint and complete."""

    name = "config"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues = list(queues)

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]:
        return list(self.queues)


class MachineRoomStrategy:
    """Queues of the machine rooms this consumer serves, shared out evenly among the group
    (RocketMQ ``AllocateMessageQueueByMachineRoom``). Every consumer of the group is
    configured with the same rooms; ``queue_rooms`` says which room each queue lives in
    (a mapping, or a function of the queue)."""

    name = "machine-room"

    def __init__(self, consumer_rooms: Iterable[str],
                 queue_rooms: Mapping[MessageQueue, str] | Callable[[MessageQueue], str]) -> None:
        self.consumer_rooms = frozenset(consumer_rooms)
        if not self.consumer_rooms:
            raise ConfigError("machine-room allocation needs at least one room")
        self._room_of: Callable[[MessageQueue], str | None]
        if callable(queue_rooms):
            self._room_of = queue_rooms
        else:
            rooms = dict(queue_rooms)
            self._room_of = rooms.get

    def allocate(self, current_id: str, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> list[MessageQueue]:
        prepared = _prepare(current_id, queues, consumer_ids)
        if prepared is None:
            return []
        qs, ids, index = prepared
        mine = [q for q in qs if self._room_of(q) in self.consumer_rooms]
        per, rem = divmod(len(mine), len(ids))
        result = mine[index * per:(index + 1) * per]
        if index < rem:
            result.append(mine[per * len(ids) + index])
        return result


STRATEGIES: dict[str, Callable[..., AllocateStrategy]] = {
    AverageStrategy.name: AverageStrategy,
    AverageByCircleStrategy.name: AverageByCircleStrategy,
    ConsistentHashStrategy.name: ConsistentHashStrategy,
}
"""Strategies that need no configuration, by name (the CLI's ``--strategy``)."""


def strategy_by_name(name: str, *, broker_name: str = DEFAULT_BROKER_NAME) -> AllocateStrategy:
    """A strategy by its name; the consistent hash keys queues with ``broker_name``."""
    try:
        factory = STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown allocation strategy {name!r}: choose one of "
                          f"{', '.join(sorted(STRATEGIES))}") from None
    if factory is ConsistentHashStrategy:
        return ConsistentHashStrategy(broker_name=broker_name)
    return factory()


def allocate_all(strategy: AllocateStrategy, queues: Iterable[MessageQueue],
                 consumer_ids: Iterable[str]) -> dict[MessageQueue, str]:
    """Owner of every queue as each consumer would compute it (admin and tests)."""
    qs = sorted(set(queues))
    ids = sorted(set(consumer_ids))
    owners: dict[MessageQueue, str] = {}
    for cid in ids:
        for q in strategy.allocate(cid, qs, ids):
            owners.setdefault(q, cid)
    return owners
