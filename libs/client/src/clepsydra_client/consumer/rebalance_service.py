"""RebalanceService: heartbeat to the store, then take and give up queues (SPEC C1, C2, C5).

Every heartbeat answer carries the group's live consumer ids (sorted, the same list on every
consumer); the allocation strategy turns it into this consumer's queues. Hand-over rules, so
that no message is consumed by two consumers at once:

- a queue no longer owned stops pulling at once; messages not yet given to the listener are
  forgotten; running listeners get up to ``drop_wait_s`` to finish; then its C4 offset is
  committed and later outcomes are ignored;
- a newly owned queue that another *live* consumer owned under the previous view waits
  ``handover_grace_s`` (longer than one heartbeat plus the drop wait) before its committed
  offset is read and its first pull, so the previous owner has seen the change and
  committed. A queue whose previous owner left (unregistered or expired) starts at once.

Orderly consumers in clustering mode rely on the store's queue locks instead of the grace
(DEC-orderly-queue-locks, :mod:`clepsydra_client.consumer.queue_lock`): a newly owned queue is
locked before its committed offset is read (no lock: tried again a heartbeat later); every lock
is renewed every ``lock_renew_interval_s``; a queue given up is unlocked only once its listener
has returned and its offset is committed (however long that takes; the lock is renewed
meanwhile); a queue whose lock is lost (refused at renewal) is dropped without a commit, not
consumed, and locked again when it can be.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from clepsydra_client.consumer.consume_service import Stats, wait_idle
from clepsydra_client.consumer.listener import ConsumeFromWhere, MessageModel
from clepsydra_client.consumer.offsets import OffsetStore
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.pulling import QueuePuller
from clepsydra_client.consumer.queue_lock import QueueLockClient
from clepsydra_client.consumer.rebalance import AllocateStrategy, allocate_all
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.consumer.thread_pools import ScheduledPool
from clepsydra_client.message import MessageQueue
from clepsydra_client.routing import Router
from clepsydra_client.topics import TopicInfo
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.groups import Heartbeat, HeartbeatAnswer

logger = logging.getLogger(__name__)

DROP_POLL_S = 0.05
START_RETRY_S = 1.0


class RebalanceSettings(Protocol):
    """The push consumer's settings the rebalance reads (``PushSettings`` is one)."""

    @property
    def message_model(self) -> MessageModel: ...
    @property
    def strategy(self) -> AllocateStrategy: ...
    @property
    def consume_from_where(self) -> ConsumeFromWhere: ...
    @property
    def young_queue_limit(self) -> int: ...
    @property
    def heartbeat_interval_s(self) -> float: ...
    @property
    def effective_grace_s(self) -> float: ...
    @property
    def effective_drop_wait_s(self) -> float: ...


class GroupMember(Protocol):
    """The part of a push consumer the rebalance service works for (``PushConsumer`` is one):
    declared here, so that this module does not import :mod:`clepsydra_client.consumer.push`,
    which imports it."""

    group: str
    client_id: str
    store: HttpClient
    router: Router
    offset_store: OffsetStore
    stats: Stats

    @property
    def settings(self) -> RebalanceSettings: ...
    @property
    def clustering(self) -> bool: ...
    @property
    def orderly(self) -> bool: ...
    def all_subscriptions(self) -> dict[str, TagExpression]: ...


@dataclass(slots=True)
class Claim:
    """A queue this consumer owns: pulling (``started``) or waiting for its grace."""

    queue: MessageQueue
    expression: TagExpression
    not_before: float
    started: bool = False


class RebalanceService:
    def __init__(self, consumer: GroupMember, puller: QueuePuller,
                 timers: ScheduledPool) -> None:
        self.consumer = consumer
        self.puller = puller
        self.timers = timers
        self.store = consumer.store
        self.router = consumer.router
        self.consistent = True
        self.mismatches: list[dict[str, Any]] = []
        self.consumers: list[str] = []
        self._previous: list[str] | None = None
        self._lock = threading.Lock()
        self._claims: dict[MessageQueue, Claim] = {}
        self._finalizing: dict[MessageQueue, ProcessQueue] = {}
        self._routes: dict[str, TopicInfo] = {}
        self.locking = consumer.clustering and consumer.orderly
        """Orderly clustering: queues are consumed under the store's queue locks
        (DEC-orderly-queue-locks)."""
        self.locks = QueueLockClient(self.store, consumer.group, consumer.client_id,
                                     self.router)

    # ---- heartbeat -----------------------------------------------------------------------

    def _stores(self) -> list[HttpClient]:
        """Every store shard's client (DEC-store-shards; the one store with one shard)."""
        if not self.router.clustered:
            return [self.store]
        return [self.router.client(m.id) for m in self.router.members()]

    def heartbeat(self) -> list[str]:
        """Heartbeat to every store shard (as RocketMQ's consumers heartbeat every broker);
        the group's consumers are those any shard that answered knows. ClepsydraError when no
        shard answers."""
        c = self.consumer
        subs = c.all_subscriptions()
        body = Heartbeat(c.client_id, {t: str(e) for t, e in subs.items()},
                         str(c.settings.message_model)).to_json()
        answers: list[HeartbeatAnswer] = []
        failed: ClepsydraError | None = None
        for store in self._stores():
            try:
                answers.append(read_answer(HeartbeatAnswer, store.post(
                    store.path("/v1/groups/{}/heartbeat", c.group), body), "heartbeat"))
            except ClepsydraError as exc:
                failed = exc
        if not answers:
            assert failed is not None
            raise failed
        consumers = sorted({x for answer in answers for x in answer.consumers})
        consistent = all(answer.consistent for answer in answers)
        if not consistent:
            self._report_mismatch([m.to_json() for answer in answers
                                   for m in answer.mismatches])
        elif not self.consistent:
            logger.info("group=%s subscriptions agree again (C5)", c.group)
            self.mismatches = []
        self.consistent = consistent
        self.consumers = consumers
        return consumers

    def _report_mismatch(self, mismatches: list[dict[str, Any]]) -> None:
        """C5: a group whose consumers subscribe differently is reported, not tolerated
        silently: exposed on the consumer (as the store's JSON of each :class:`Mismatch`), and
        logged as a warning whenever it changes."""
        c = self.consumer
        changed = mismatches != self.mismatches or self.consistent
        self.mismatches = mismatches
        if changed:
            logger.warning("group=%s consumers subscribe differently (SPEC C5): this consumer %s "
                           "subscribes %s; mismatches=%s", c.group, c.client_id,
                           {t: str(e) for t, e in c.all_subscriptions().items()}, mismatches)

    def heartbeat_and_rebalance(self) -> None:
        consumers = self.heartbeat()
        self.rebalance(consumers)

    def unregister(self) -> None:
        c = self.consumer
        for store in self._stores():
            try:
                store.delete(store.path("/v1/groups/{}/consumers/{}", c.group, c.client_id))
            except ClepsydraError as exc:
                logger.warning("unregister failed group=%s client_id=%s store=%s error=%s",
                               c.group, c.client_id, store.base_url, exc)

    # ---- allocation ----------------------------------------------------------------------

    def owned(self) -> list[MessageQueue]:
        with self._lock:
            return sorted(self._claims)

    def rebalance(self, consumers: list[str]) -> None:
        c = self.consumer
        me = c.client_id
        previous = self._previous if self._previous is not None else [
            x for x in consumers if x != me]
        wanted: dict[MessageQueue, tuple[TagExpression, bool]] = {}
        for topic, expression in c.all_subscriptions().items():
            route = self.router.topic(topic)
            if route is None:
                if not naming.is_retry_topic(topic):
                    logger.warning("subscribed topic %s does not exist (yet) group=%s", topic,
                                   c.group)
                continue
            self._routes[topic] = route
            queues = route.message_queues()
            if not c.clustering:
                wanted.update((q, (expression, False)) for q in queues)
                continue
            strategy = c.settings.strategy
            before = allocate_all(strategy, queues, previous) if previous else {}
            for q in strategy.allocate(me, queues, consumers):
                owner = before.get(q)
                wanted[q] = (expression, not self.locking and owner is not None
                             and owner != me and owner in consumers)
        self._previous = consumers
        self._apply(wanted)

    def _apply(self, wanted: dict[MessageQueue, tuple[TagExpression, bool]]) -> None:
        now = time.monotonic()
        grace = self.consumer.settings.effective_grace_s
        with self._lock:
            gone = [q for q in self._claims if q not in wanted]
            for q in gone:
                del self._claims[q]
            fresh = []
            for q, (expression, needs_grace) in wanted.items():
                claim = self._claims.get(q)
                if claim is None:
                    claim = Claim(q, expression, now + (grace if needs_grace else 0.0))
                    self._claims[q] = claim
                    fresh.append(claim)
                elif claim.expression != expression:
                    claim.expression = expression
                    self.puller.set_expression(q, expression)
        for q in gone:
            self._drop(q)
        for claim in fresh:
            logger.info("rebalance: group=%s client_id=%s now owns %s%s", self.consumer.group,
                        self.consumer.client_id, claim.queue,
                        f" after a {grace:.1f}s hand-over grace" if claim.not_before > now
                        else "")
            self.timers.schedule(functools.partial(self._start, claim), claim.not_before - now)

    # ---- taking a queue ------------------------------------------------------------------

    def _start(self, claim: Claim) -> None:
        with self._lock:
            if self._claims.get(claim.queue) is not claim or claim.started:
                return
            finalizing = claim.queue in self._finalizing
        if finalizing:
            self.timers.schedule(lambda: self._start(claim), DROP_POLL_S)
            return
        valid_until: float | None = None
        try:
            if self.locking:
                locked, valid_until = self.locks.lock([claim.queue])
                if claim.queue not in locked:
                    logger.info("rebalance: %s is locked by another consumer; trying again in "
                                "%.1fs", claim.queue, self._lock_retry_s)
                    self.timers.schedule(lambda: self._start(claim), self._lock_retry_s)
                    return
            offset = self._start_offset(claim.queue)
        except ClepsydraError as exc:
            logger.warning("cannot lock or read the committed offset of %s (%s); retrying",
                           claim.queue, exc)
            self.timers.schedule(lambda: self._start(claim), START_RETRY_S)
            return
        with self._lock:
            if self._claims.get(claim.queue) is not claim:
                stale = True
            else:
                stale = False
                claim.started = True
        if stale:
            if valid_until is not None:
                self._unlock([claim.queue])
            return
        self.puller.start_queue(claim.queue, claim.expression, offset,
                                lock_valid_until=valid_until)

    @property
    def _lock_retry_s(self) -> float:
        return self.consumer.settings.heartbeat_interval_s

    def _start_offset(self, queue: MessageQueue) -> int:
        """The group's committed offset, else consume-from-where (retry topics: from the
        start, so that nothing sent back before this consumer came is skipped). LAST on a young
        queue - nothing deleted yet, at most ``young_queue_limit`` entries - starts at 0, as
        RocketMQ's broker starts a new group while the queue's first message is still at hand:
        a group's first consumer sees what was sent just before it came."""
        c = self.consumer
        committed = c.offset_store.read(queue)
        if committed is not None and committed >= 0:
            return committed
        route = self._routes.get(queue.topic)
        info = route.queue(queue.queue_id, queue.shard) if route else None
        if info is None:
            start = 0
        elif (naming.is_retry_topic(queue.topic)
              or c.settings.consume_from_where == ConsumeFromWhere.FIRST
              or (info.min_offset == 0 and info.max_offset <= c.settings.young_queue_limit)):
            start = info.min_offset
        else:
            start = info.max_offset
        c.offset_store.update(queue, start)
        logger.info("no committed offset for %s: starting at %d (%s)", queue, start,
                    c.settings.consume_from_where)
        return start

    # ---- giving a queue up ---------------------------------------------------------------

    def _drop(self, queue: MessageQueue, *, lock_lost: bool = False) -> None:
        pq = self.puller.drop_queue(queue)
        if pq is None:
            return
        logger.info("rebalance: group=%s client_id=%s gives up %s%s", self.consumer.group,
                    self.consumer.client_id, queue,
                    " (its lock is lost: no commit)" if lock_lost else "")
        with self._lock:
            self._finalizing[queue] = pq
        deadline = time.monotonic() + self.consumer.settings.effective_drop_wait_s

        def finalize() -> None:
            if pq.drop_final:
                return
            if pq.locking:
                # the orderly thread holds this while it consumes; once taken here, no
                # listener of the queue runs again, and only then is its lock given back
                if not pq.orderly_lock.acquire(blocking=False):
                    self.timers.schedule(finalize, DROP_POLL_S)
                    return
                self._commit_dropped(queue, pq, commit=not lock_lost and pq.lock_held())
                return
            if pq.in_flight() and time.monotonic() < deadline:
                self.timers.schedule(finalize, DROP_POLL_S)
                return
            self._commit_dropped(queue, pq)

        finalize()

    def _commit_dropped(self, queue: MessageQueue, pq: ProcessQueue, *,
                        commit: bool = True) -> None:
        """The dropped queue's last commit, then (orderly) its unlock; outcomes arriving later
        are ignored. ``commit=False``: its lock is lost, another consumer may own it now."""
        with self._lock:
            if pq.drop_final:
                return
            pq.drop_final = True
        store = self.consumer.offset_store
        offset = pq.committable()
        try:
            if commit:
                store.update(queue, offset)
                store.persist([queue])
                logger.info("committed dropped queue=%s queue_offset=%d", queue, offset)
                if pq.locking:
                    self._unlock([queue])
        except ClepsydraError as exc:
            logger.warning("commit of dropped queue=%s failed: %s", queue, exc)
        finally:
            store.forget(queue)
            with self._lock:
                if self._finalizing.get(queue) is pq:
                    del self._finalizing[queue]

    def finish_drops(self, wait_s: float) -> None:
        """Shutdown: commit every queue still being given up once its running listener has
        returned, waiting ``wait_s`` at most in all. The finalizing timers have stopped, so
        without this wait a listener returning after the stop would leave its queue committed
        behind it: the next owner would consume that message again. An orderly queue whose
        listener still runs after the wait keeps its lock until it expires."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            pending = list(self._finalizing.items())
        for queue, pq in pending:
            left = max(deadline - time.monotonic(), 0.0)
            if pq.locking:
                if pq.orderly_lock.acquire(timeout=left):
                    self._commit_dropped(queue, pq, commit=pq.lock_held())
                continue
            wait_idle(pq, left)
            self._commit_dropped(queue, pq)

    # ---- queue locks (orderly, clustering; DEC-orderly-queue-locks) ------------------------

    def renew_locks(self) -> None:
        """Renew the lock of every queue consumed or being given up; a queue whose lock is
        refused is dropped (without a commit) and locked again later."""
        if not self.locking:
            return
        pqs = [pq for pq in self.puller.active() if pq.locking]
        with self._lock:
            pqs += [pq for pq in self._finalizing.values() if pq.locking and not pq.drop_final]
        if not pqs:
            return
        try:
            locked, valid_until = self.locks.lock(pq.queue for pq in pqs)
        except ClepsydraError as exc:
            logger.warning("queue lock renewal failed group=%s client_id=%s error=%s",
                           self.consumer.group, self.consumer.client_id, exc)
            return
        for pq in pqs:
            if pq.queue in locked:
                pq.lock_valid_until = max(pq.lock_valid_until, valid_until)
                continue
            pq.lock_valid_until = 0.0
            self.consumer.stats.add("locks_lost")
            logger.warning("queue lock lost group=%s client_id=%s queue=%s: not consumed "
                           "any more", self.consumer.group, self.consumer.client_id, pq.queue)
            if not pq.dropped:
                self._lose(pq.queue)

    def _lose(self, queue: MessageQueue) -> None:
        """A queue still owned whose lock went to another consumer: drop it, then claim it
        again (it starts once the lock is granted again)."""
        self._drop(queue, lock_lost=True)
        with self._lock:
            claim = self._claims.get(queue)
            if claim is None:
                return
            fresh = Claim(queue, claim.expression, time.monotonic())
            self._claims[queue] = fresh
        self.timers.schedule(functools.partial(self._start, fresh), self._lock_retry_s)

    def unlock_idle(self) -> None:
        """Shutdown, after the last commit: give back the locks of the queues no listener is
        consuming (a running one keeps its lock until the store expires it)."""
        if not self.locking:
            return
        idle = [pq.queue for pq in self.puller.active()
                if pq.locking and pq.lock_held() and pq.orderly_lock.acquire(blocking=False)]
        self._unlock(idle)

    def _unlock(self, queues: list[MessageQueue]) -> None:
        try:
            self.locks.unlock(queues)
        except ClepsydraError as exc:
            logger.warning("unlock failed group=%s queues=%s error=%s (the store expires "
                           "them)", self.consumer.group, [str(q) for q in queues], exc)
