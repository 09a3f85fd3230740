"""QueueLockClient: an orderly consumer's side of the store's queue locks
(DEC-orderly-queue-locks; RocketMQ's lockBatchMQ / unlockBatchMQ).

In clustering mode an orderly consumer consumes a queue only while it holds the queue's lock
at the store: it locks a newly owned queue before reading its committed offset, renews every
lock every ``lock_renew_interval_s`` (20 s), and unlocks a queue it gave up once its last
listener returned and its progress was committed. The store frees a lock that was not renewed
for its expiry (``CLEPSYDRA_STORE_LOCK_EXPIRY_S``, 60 s); the consumer itself trusts a lock for
only half of that from the moment it *asked* (RocketMQ: 30 s of 60), so it has stopped
consuming a queue well before the store can give it to another consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from clepsydra_client.message import MessageQueue
from clepsydra_client.routing import Router
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.locks import LockAnswer, LockRequest, QueueRef

logger = logging.getLogger(__name__)

LOCAL_VALIDITY_SHARE = 0.5
"""The share of the store's lock expiry a granted lock is trusted for, counted from the
request."""


class QueueLockClient:
    """Each queue is locked on its own store shard (DEC-store-shards: RocketMQ locks a queue on
    its broker); with ``router`` None, or one shard, on ``store``."""

    def __init__(self, store: HttpClient, group: str, client_id: str,
                 router: Router | None = None) -> None:
        self.store = store
        self.group = group
        self.client_id = client_id
        self.router = router

    def _by_shard(self, queues: Iterable[MessageQueue]) -> dict[int, list[MessageQueue]]:
        out: dict[int, list[MessageQueue]] = {}
        for q in sorted(set(queues)):
            out.setdefault(q.shard, []).append(q)
        return out

    def _client(self, shard: int) -> HttpClient:
        if self.router is None or (shard == 0 and not self.router.clustered):
            return self.store
        return self.router.client(shard)

    def lock(self, queues: Iterable[MessageQueue]) -> tuple[set[MessageQueue], float]:
        """Lock or renew ``queues``: (the ones held now, the ``time.monotonic()`` until which
        they may be consumed). ClepsydraError when no shard of theirs answers; the queues of
        a shard that does not answer are not held."""
        by_shard = self._by_shard(queues)
        if not by_shard:
            return set(), 0.0
        sent_at = time.monotonic()
        locked: set[MessageQueue] = set()
        valid_until: float | None = None
        failed: ClepsydraError | None = None
        for shard, asked in by_shard.items():
            http = self._client(shard)
            try:
                answer = read_answer(LockAnswer, http.post(
                    http.path("/v1/groups/{}/locks", self.group), self._body(asked)), "lock")
            except ClepsydraError as exc:
                logger.warning("queue locks of store shard %d not renewed group=%s: %s", shard,
                               self.group, exc)
                failed = exc
                continue
            locked |= {MessageQueue(q.topic, q.queue_id, shard) for q in answer.locked}
            until = sent_at + answer.expiry_ms / 1000 * LOCAL_VALIDITY_SHARE
            valid_until = until if valid_until is None else min(valid_until, until)
        if valid_until is None:
            assert failed is not None
            raise failed
        return locked, valid_until

    def unlock(self, queues: Iterable[MessageQueue]) -> None:
        """Release ``queues`` (best effort: a lock not released expires at the store)."""
        for shard, asked in self._by_shard(queues).items():
            http = self._client(shard)
            http.post(http.path("/v1/groups/{}/locks/unlock", self.group), self._body(asked))
            logger.info("unlocked group=%s client_id=%s queues=%s", self.group, self.client_id,
                        [str(q) for q in asked])

    def _body(self, queues: list[MessageQueue]) -> dict[str, object]:
        return LockRequest(self.client_id,
                           [QueueRef(q.topic, q.queue_id) for q in queues]).to_json()
