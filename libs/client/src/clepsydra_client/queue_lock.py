"""QueueLockClient: an orderly consumer's side of the store's queue locks (issue 12.5;
RocketMQ's lockBatchMQ / unlockBatchMQ).

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
from clepsydra_core.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.locks import LockAnswer, LockRequest, QueueRef

logger = logging.getLogger(__name__)

LOCAL_VALIDITY_SHARE = 0.5
"""The share of the store's lock expiry a granted lock is trusted for, counted from the
request."""


class QueueLockClient:
    def __init__(self, store: HttpClient, group: str, client_id: str) -> None:
        self.store = store
        self.group = group
        self.client_id = client_id

    def lock(self, queues: Iterable[MessageQueue]) -> tuple[set[MessageQueue], float]:
        """Lock or renew ``queues``: (the ones held now, the ``time.monotonic()`` until which
        they may be consumed). ClepsydraError when the store does not answer."""
        asked = sorted(set(queues))
        if not asked:
            return set(), 0.0
        sent_at = time.monotonic()
        answer = read_answer(LockAnswer, self.store.post(
            self.store.path("/v1/groups/{}/locks", self.group), self._body(asked)), "lock")
        expiry_s = answer.expiry_ms / 1000
        locked = {MessageQueue(q.topic, q.queue_id) for q in answer.locked}
        return locked, sent_at + expiry_s * LOCAL_VALIDITY_SHARE

    def unlock(self, queues: Iterable[MessageQueue]) -> None:
        """Release ``queues`` (best effort: a lock not released expires at the store)."""
        asked = sorted(set(queues))
        if not asked:
            return
        self.store.post(self.store.path("/v1/groups/{}/locks/unlock", self.group),
                        self._body(asked))
        logger.info("unlocked group=%s client_id=%s queues=%s", self.group, self.client_id,
                    [str(q) for q in asked])

    def _body(self, queues: list[MessageQueue]) -> dict[str, object]:
        return LockRequest(self.client_id,
                           [QueueRef(q.topic, q.queue_id) for q in queues]).to_json()
