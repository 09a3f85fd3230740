"""QueueLocks: the store-side lock of orderly consumption, after RocketMQ's
``RebalanceLockManager``.

An orderly consumer in clustering mode consumes a queue only while it holds that queue's lock
for its group: it locks a batch of queues (the ones granted are answered), renews them well
within the expiry, and unlocks a queue once it has given it up (its last listener finished and
its progress committed). A lock not renewed for ``expiry_ms`` is free for the next consumer.
Rebalance alone cannot give this: it only decides who *should* own a queue, and a listener
slower than the hand-over would overlap with the next owner.

In memory, like RocketMQ's: after a store restart every queue is free again, and the owners
take their locks back at their next renewal. A consumer that unregisters keeps its locks until
it unlocks them or they expire: a listener still running past its shutdown wait must not see
its queue handed on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

QueueKey = tuple[str, int]
"""(topic, queue id)."""


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a queue's lock, until when (ms since the epoch, the store's clock)."""

    topic: str
    queue_id: int
    client_id: str
    expires_at_ms: int


class QueueLocks:
    """Thread-safe lock table: group -> (topic, queue id) -> (client id, last lock time)."""

    def __init__(self, expiry_ms: int, clock_ms: Callable[[], int] | None = None) -> None:
        if expiry_ms <= 0:
            raise ValueError(f"expiry_ms must be positive, got {expiry_ms}")
        self.expiry_ms = expiry_ms
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._groups: dict[str, dict[QueueKey, tuple[str, int]]] = {}
        self._lock = threading.Lock()

    def lock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Lock (or renew) each queue for ``client_id``: the ones now held by it, in the order
        asked. A queue held by another client whose lock has not expired is refused."""
        now = self._clock_ms()
        granted: list[QueueKey] = []
        with self._lock:
            table = self._groups.setdefault(group, {})
            for key in dict.fromkeys(queues):
                holder = table.get(key)
                if holder is None or holder[0] == client_id or self._expired(holder, now):
                    table[key] = (client_id, now)
                    granted.append(key)
            if not table:
                del self._groups[group]
        return granted

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Release the queues ``client_id`` holds; the ones released (a queue held by another
        client, or by nobody, is left alone)."""
        released: list[QueueKey] = []
        with self._lock:
            table = self._groups.get(group)
            if not table:
                return released
            for key in dict.fromkeys(queues):
                holder = table.get(key)
                if holder is not None and holder[0] == client_id:
                    del table[key]
                    released.append(key)
            if not table:
                del self._groups[group]
        return released

    def holders(self, group: str) -> list[LockHolder]:
        """The group's unexpired locks, sorted by topic and queue id (expired ones are
        forgotten)."""
        now = self._clock_ms()
        with self._lock:
            table = self._groups.get(group)
            if not table:
                return []
            for key in [k for k, h in table.items() if self._expired(h, now)]:
                del table[key]
            if not table:
                del self._groups[group]
            return [LockHolder(topic, queue_id, client_id, since + self.expiry_ms)
                    for (topic, queue_id), (client_id, since) in sorted(table.items())]

    def _expired(self, holder: tuple[str, int], now: int) -> bool:
        return now - holder[1] > self.expiry_ms
