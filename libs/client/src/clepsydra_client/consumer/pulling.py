"""QueuePuller: the pull loop of every owned queue, feeding its ProcessQueue and the consume
service. Pulling is decoupled from consuming: a loop pulls again at once while messages come,
and holds back while the process queue is full (flow control).

A pull asks for the store's pull hold (``waitMs``, DEC-pull-hold): with nothing new in the queue the
store answers when a message is appended to it, or after ``hold_ms`` with an empty page, and
the loop pulls again at once. Each held pull keeps one of the loop's ``threads`` busy, so at
most ``threads - 1`` pulls ask for it at once: one thread is always left for the other queues
(and the loops' retries and flow control). A pull that gets no hold (none left, ``hold_ms`` 0)
and one the store answers empty before the wait ended (a store holding all the pulls it may,
one that stops, one without the hold) backs off as before: 10 ms, doubling to
``idle_max_s``.

Stopping (:meth:`QueuePuller.stop_all`) waits for no held pull: a pull answered after it is
neither dispatched nor advanced (checked under the lock the stop takes)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from clepsydra_client.consumer.consume_service import ConsumeService, Stats, wait_idle
from clepsydra_client.consumer.offsets import OffsetTracker
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.consumer.thread_pools import ScheduledPool
from clepsydra_client.message import PAGE, Message, MessageQueue
from clepsydra_client.routing import Router
from clepsydra_client.topics import TopicInfo
from clepsydra_core.errors import ClepsydraError, OffsetOutOfRange
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.topics import TopicAnswer

logger = logging.getLogger(__name__)

FLOW_CONTROL_DELAY_S = 0.05
PULL_ERROR_DELAY_S = 1.0
IDLE_MIN_S = 0.01
DEFAULT_HOLD_MS = 5_000
"""The store's pull hold a pull asks for (at most ``MAX_PULL_WAIT_MS``)."""
DEFAULT_LINGER_MS = 20
"""A drained queue's pause before its next pull: with the hold, a queue that receives 500
messages a second was pulled once a message (each pull woken by one append); at 5 ms, still
a pull for every one to three messages, each costing the store and this process more than the
message (DEC-consumer-linger: 20 ms, a third to a quarter of the pulls)."""
DEFAULT_THREADS = 8
"""The pull loops' threads: up to 7 queues held at once (a topic has 4 queues by default)."""


@dataclass(frozen=True, slots=True)
class PullSettings:
    batch_size: int = 32
    threshold: int = 1000
    max_span: int = 2000
    """0 disables the span check (orderly)."""
    idle_max_s: float = 0.2
    orderly: bool = False
    hold_ms: int = DEFAULT_HOLD_MS
    """A pull asks the store to hold it up to this long while the queue has nothing new
    (``waitMs``); 0: no hold, the back-off only."""
    threads: int = DEFAULT_THREADS
    """The pull loops' threads (the ScheduledPool's): at most ``threads - 1`` pulls are held."""
    linger_ms: int = DEFAULT_LINGER_MS
    """After a pull that took the queue's last messages, the next pull waits this long, so
    that messages arriving meanwhile come in one pull rather than in one held pull each."""


class QueuePuller:
    def __init__(self, store: HttpClient, timers: ScheduledPool, service: ConsumeService,
                 stats: Stats, settings: PullSettings, router: Router | None = None) -> None:
        self.store = store
        self.router = router
        """Each queue is pulled from its own store shard (DEC-store-shards)."""
        self.timers = timers
        self.service = service
        self.stats = stats
        self.settings = settings
        self.stopped = False
        self._lock = threading.Lock()
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._exprs: dict[MessageQueue, TagExpression] = {}
        self._idle: dict[MessageQueue, float] = {}
        self._holds = threading.BoundedSemaphore(max(settings.threads - 1, 1))
        """A held pull takes one (none left: the pull is not held)."""
        self._answering = threading.Lock()
        """Held while a pull's answer is dispatched and stopping (no dispatch after a stop)."""
        self._holding: set[threading.Thread] = set()
        """The threads waiting in a held pull now (under ``_answering``)."""

    def active(self) -> list[ProcessQueue]:
        with self._lock:
            return list(self._pqs.values())

    def get(self, queue: MessageQueue) -> ProcessQueue | None:
        with self._lock:
            return self._pqs.get(queue)

    def start_queue(self, queue: MessageQueue, expression: TagExpression,
                    start_offset: int, *, lock_valid_until: float | None = None
                    ) -> ProcessQueue:
        """Start pulling ``queue``; with ``lock_valid_until``, an orderly queue consumed only
        while its store lock is held (DEC-orderly-queue-locks)."""
        pq = ProcessQueue(queue, start_offset)
        if lock_valid_until is not None:
            pq.locking = True
            pq.lock_valid_until = lock_valid_until
        with self._lock:
            old = self._pqs.get(queue)
            if old is not None:
                return old
            self._pqs[queue] = pq
            self._exprs[queue] = expression
            self._idle[queue] = 0.0
        logger.info("pulling queue=%s from queue_offset=%d", queue, start_offset)
        self.timers.schedule(lambda: self._pull(pq))
        return pq

    def set_expression(self, queue: MessageQueue, expression: TagExpression) -> None:
        with self._lock:
            if queue in self._exprs:
                self._exprs[queue] = expression

    def drop_queue(self, queue: MessageQueue) -> ProcessQueue | None:
        """Stop pulling a queue; messages not yet handed to the listener are forgotten."""
        with self._lock:
            pq = self._pqs.pop(queue, None)
            self._exprs.pop(queue, None)
            self._idle.pop(queue, None)
        if pq is not None:
            with self._answering:
                pq.dropped = True
            pq.clear_unstarted()
        return pq

    def stop(self) -> frozenset[threading.Thread]:
        """No more pulls, and no answer dispatched from now on (a held pull still on the
        wire included); the threads waiting in a held pull now, which need not be waited for
        (``ScheduledPool.stop(skip=...)``)."""
        with self._answering:
            self.stopped = True
            return frozenset(self._holding)

    def stop_all(self, wait_s: float) -> None:
        """Shutdown: no more pulls; wait (bounded) for running listeners."""
        self.stop()
        deadline = time.monotonic() + wait_s
        for pq in self.active():
            wait_idle(pq, max(deadline - time.monotonic(), 0.0))

    # ---- the loop ------------------------------------------------------------------------

    def _again(self, pq: ProcessQueue, delay_s: float) -> None:
        if not (self.stopped or pq.dropped):
            self.timers.schedule(lambda: self._pull(pq), delay_s)

    def _pull(self, pq: ProcessQueue) -> None:
        """One pull of one queue, then the next one scheduled; whatever goes wrong, the loop
        goes on (a dead loop would leave the queue unconsumed)."""
        try:
            self._pull_once(pq)
        except Exception:
            if self.stopped or pq.dropped:
                return  # a held pull answered after the stop (its connection closed)
            logger.exception("pull loop error queue=%s; pulling again in %.1fs", pq.queue,
                             PULL_ERROR_DELAY_S)
            self._again(pq, PULL_ERROR_DELAY_S)

    def _pull_once(self, pq: ProcessQueue) -> None:
        if self.stopped or pq.dropped:
            return
        s = self.settings
        # RocketMQ's flow control: no pull while *more* than the threshold are unfinished
        # (DEC-flow-control-over): a pull of threshold messages still has the next one sent
        if pq.count > s.threshold or (s.max_span and pq.span() > s.max_span):
            self.stats.add("flow_control")
            self._again(pq, FLOW_CONTROL_DELAY_S)
            return
        with self._lock:
            expression = self._exprs.get(pq.queue, TagExpression.parse("*"))
        offset = pq.tracker.next_offset
        params: dict[str, object] = {"offset": offset, "max": s.batch_size,
                                     "tags": expression.query()}
        held = s.hold_ms > 0 and self._holds.acquire(blocking=False)
        if held:
            with self._answering:
                if self.stopped:
                    self._holds.release()
                    return
                self._holding.add(threading.current_thread())
            params["waitMs"] = s.hold_ms
        started = time.monotonic()
        store = self._client(pq.queue)
        try:
            raw = store.get(
                store.path("/v1/topics/{}/queues/{}/messages", pq.queue.topic,
                           pq.queue.queue_id), params,
                timeout_s=store.timeout_s + (s.hold_ms / 1000 if held else 0.0))
        except OffsetOutOfRange:
            self._correct_offset(pq, offset)
            self._again(pq, 0.0)
            return
        except ClepsydraError as exc:
            if self.stopped or pq.dropped:
                return  # a held pull's connection closed by the stop
            self.stats.add("pull_errors")
            logger.warning("pull failed queue=%s queue_offset=%d error=%s", pq.queue, offset, exc)
            self._again(pq, PULL_ERROR_DELAY_S)
            return
        finally:
            if held:
                with self._answering:
                    self._holding.discard(threading.current_thread())
                self._holds.release()
        # held the whole wait: nothing came, pull again at once (held again)
        waited = held and time.monotonic() - started >= s.hold_ms / 1000
        with self._answering:
            if self.stopped or pq.dropped:
                # Given up while the pull was on the wire: neither dispatch nor advance.
                # Moving the tracker past messages nobody will consume would let the last
                # commit of a dropped queue (or of a shutdown) skip them, and the next owner
                # never sees them.
                return
            self._answered(pq, expression, offset, raw, waited)

    def _answered(self, pq: ProcessQueue, expression: TagExpression, offset: int,
                  raw: dict[str, Any], waited: bool) -> None:
        """Dispatch what a pull answered and schedule the next pull."""
        pq.last_pull_s = time.monotonic()
        messages = [Message.from_json(m) for m in raw.get(PAGE["messages"]) or []]
        next_offset = int(raw.get(PAGE["next_offset"], offset + len(messages)))
        matched = [m for m in messages if expression.matches(m.tags)
                   and m.queue_offset >= offset]
        if matched:
            self.stats.add("pulled", len(matched))
            self.service.dispatch(pq, matched)
        pq.advance(next_offset)
        if messages or next_offset > offset or waited:  # waited: held the whole wait
            self._idle[pq.queue] = 0.0
            drained = messages and next_offset >= int(raw.get(PAGE["max_offset"], next_offset))
            self._again(pq, self.settings.linger_ms / 1000 if drained else 0.0)
        else:
            idle = min(max(self._idle.get(pq.queue, 0.0) * 2, IDLE_MIN_S),
                       self.settings.idle_max_s)
            self._idle[pq.queue] = idle
            self._again(pq, idle)

    def _client(self, queue: MessageQueue) -> HttpClient:
        """The store shard a queue is on (the one store with a single shard)."""
        if self.router is None or not queue.shard:
            return self.store if self.router is None or not self.router.clustered \
                else self.router.client(0)
        return self.router.client(queue.shard)

    def _correct_offset(self, pq: ProcessQueue, offset: int) -> None:
        """The pull offset is outside the queue (segments deleted, store reset): move to the
        nearest end when nothing of the queue is in flight."""
        try:
            info = TopicInfo.of(read_answer(TopicAnswer, self._client(pq.queue).get(
                self.store.path("/v1/topics/{}", pq.queue.topic)), "topic"),
                pq.queue.shard).queue(pq.queue.queue_id, pq.queue.shard)
        except ClepsydraError:
            return
        if info is None or pq.tracker.pending_count:
            return
        target = info.min_offset if offset < info.min_offset else info.max_offset
        logger.warning("queue=%s queue_offset=%d out of range [%d, %d): moving to %d",
                       pq.queue, offset, info.min_offset, info.max_offset, target)
        pq.tracker = OffsetTracker(target)
