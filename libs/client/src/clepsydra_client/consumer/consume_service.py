"""Running the listener over pulled messages: concurrently (R11, R13, R14) or orderly (R12).

Both services take messages a pull produced for one :class:`ProcessQueue`, run the listener on
the consume pool inside a ``client.consume`` span that continues the producer's trace, and
complete each message (success, sent back, dead-lettered) so the C4 offset can move.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from clepsydra_client.consumer.listener import (
    ConcurrentContext,
    ConcurrentListener,
    ConsumeResult,
    MessageModel,
    OrderlyContext,
    OrderlyListener,
    OrderlyResult,
)
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.sendback import SendBack, failure_reason
from clepsydra_client.consumer.thread_pools import ScheduledPool, WorkerPool
from clepsydra_client.message import Message
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.retry_rules import (
    CONSUME_TIMEOUT_LEVEL,
    DEFAULT_MAX_RECONSUME_TIMES,
    ORDERLY_MAX_RECONSUME_TIMES,
    max_reconsume_times_or,
)
from clepsydra_core.runtime import telemetry

logger = logging.getLogger(__name__)

LOCK_RECHECK_S = 0.1
"""Orderly: how soon a queue whose store lock lapsed (renewal late) is looked at again."""


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    group: str
    client_id: str
    model: MessageModel
    batch_size: int
    max_reconsume_times: int | None
    """None: omitted from send-back (the group's retryMaxTimes applies, R5)."""
    consume_timeout_s: float
    suspend_time_ms: int
    local_retry_delay_s: float


class Stats:
    """Counters a consumer exposes (``consumer.stats``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class ConsumeSpan:
    """The ``client.consume`` span made current for the listener call: a plain context
    manager (cheaper than ``start_as_current_span`` at one span per message)."""

    __slots__ = ("_token", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self._token: object = None

    def __enter__(self) -> trace.Span:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        self.span.end()


class ConsumeService:
    """What both services share: the pool, the send-back, the trace span."""

    def __init__(self, settings: ConsumeSettings, *, executor: WorkerPool,
                 timers: ScheduledPool, sendback: SendBack, stats: Stats) -> None:
        self.settings = settings
        self.executor = executor
        self.timers = timers
        self.sendback = sendback
        self.stats = stats
        self.stopped = False
        self._tracer = telemetry.tracer("clepsydra_client")

    def dispatch(self, pq: ProcessQueue, messages: list[Message]) -> None:
        """Hand freshly pulled messages of ``pq`` to the listener."""
        raise NotImplementedError

    def _span(self, pq: ProcessQueue, messages: list[Message]) -> ConsumeSpan:
        first = messages[0]
        parent = telemetry.extract(first.properties)
        lean = telemetry.unrecorded(self._tracer, parent)
        if lean is not None:  # not sampled (or not exported): no attributes, no links
            return ConsumeSpan(lean)
        links = [link for m in messages[1:] for link in telemetry.link_from(m.properties)]
        return ConsumeSpan(self._tracer.start_span(
            "client.consume", context=parent,
            kind=trace.SpanKind.CONSUMER, links=links,
            attributes={telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM,
                        telemetry.OPERATION_TYPE: telemetry.PROCESS,
                        telemetry.DESTINATION: first.topic,
                        telemetry.CONSUMER_GROUP: self.settings.group,
                        telemetry.MESSAGE_ID: first.msg_id,
                        telemetry.BATCH_COUNT: len(messages),
                        telemetry.QUEUE: str(pq.queue),
                        telemetry.RECONSUME_TIMES: first.reconsume_times,
                        telemetry.CLIENT_ID: self.settings.client_id}))

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self.stopped:
            return
        try:
            self.executor.submit(fn, *args)
        except RuntimeError:  # the pool shut down meanwhile
            logger.debug("consume pool closed; %s not run", fn)


class ConcurrentConsumeService(ConsumeService):
    """Batches of ``batch_size`` run in parallel; failures are sent back (clustering) or
    logged and skipped (broadcasting, R14)."""

    def __init__(self, listener: ConcurrentListener, settings: ConsumeSettings,
                 **kw: Any) -> None:
        super().__init__(settings, **kw)
        self.listener = listener

    @property
    def max_reconsume(self) -> int:
        return max_reconsume_times_or(self.settings.max_reconsume_times,
                                      DEFAULT_MAX_RECONSUME_TIMES)

    def dispatch(self, pq: ProcessQueue, messages: list[Message]) -> None:
        pq.put(messages)
        size = max(self.settings.batch_size, 1)
        for start in range(0, len(messages), size):
            self._submit(self._consume, pq, messages[start:start + size])

    def _consume(self, pq: ProcessQueue, batch: list[Message]) -> None:
        if pq.dropped or self.stopped:
            return
        batch = pq.begin(batch)
        if not batch:
            return
        view = [m.with_origin_topic() for m in batch]
        context = ConcurrentContext(pq.queue)
        error: BaseException | None = None
        with self._span(pq, view) as span:
            try:
                result = self.listener(view, context) or ConsumeResult.SUCCESS
            except Exception as exc:
                logger.warning("listener failed group=%s queue=%s msg_id=%s error=%s",
                               self.settings.group, pq.queue, batch[0].msg_id,
                               failure_reason(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
                result, error = ConsumeResult.RECONSUME_LATER, exc
                span.record_exception(exc)
            span.set_attribute(telemetry.RESULT, str(result))
            if pq.drop_final:
                logger.info("queue %s was handed over: outcome of %d messages ignored",
                            pq.queue, len(batch))
                return
            if result == ConsumeResult.SUCCESS:
                ack = min(context.ack_index, len(batch) - 1)
                ok, failed = batch[:ack + 1], batch[ack + 1:]
            else:
                ok, failed = [], batch
            self.stats.add("consumed", len(ok))
            done = [m.queue_offset for m in ok]
            reason = context.failure_reason or failure_reason(error)
            retry_later = []
            for m in failed:
                if not pq.is_pending(m.queue_offset):
                    continue  # timed out meanwhile: already sent back (R13)
                if self._return_failed(m, context.delay_level_when_next_consume, reason):
                    done.append(m.queue_offset)
                else:
                    retry_later.append(m)
        pq.finish(done)
        if retry_later:
            self._retry_locally(pq, retry_later)

    def _return_failed(self, m: Message, level: int, reason: str) -> bool:
        """True when the message is completed (sent back, or skipped in broadcasting)."""
        self.stats.add("failed")
        if self.settings.model == MessageModel.BROADCASTING:
            logger.warning("broadcasting consumer does not retry (R14): skipped group=%s "
                           "msg_id=%s reason=%s", self.settings.group, m.msg_id, reason)
            self.stats.add("skipped")
            return True
        try:
            outcome = self.sendback.send_back(m, level, self.settings.max_reconsume_times,
                                              reason)
        except ClepsydraError:
            logger.exception("send-back and its fallback failed; consuming again locally in "
                             "%.1fs group=%s msg_id=%s", self.settings.local_retry_delay_s,
                             self.settings.group, m.msg_id)
            return False
        self.stats.add("sent_back")
        self.stats.add(f"outcome_{outcome.outcome.lower()}")
        if outcome.fallback:
            self.stats.add("fallback")
        return True

    def _retry_locally(self, pq: ProcessQueue, messages: list[Message]) -> None:
        self.stats.add("local_retry", len(messages))
        pq.release(m.queue_offset for m in messages)
        again = [replace(m, reconsume_times=m.reconsume_times + 1) for m in messages]
        self.timers.schedule(lambda: self._submit(self._consume, pq, again),
                             self.settings.local_retry_delay_s)

    def expire(self, pq: ProcessQueue) -> None:
        """R13: messages held longer than the consume timeout are sent back with level 3 and
        their slots freed (the listener thread itself cannot be stopped)."""
        for m in pq.expired(self.settings.consume_timeout_s):
            if pq.drop_final:
                return
            reason = f"consume timeout: held longer than {self.settings.consume_timeout_s:g}s"
            logger.warning("%s group=%s queue=%s msg_id=%s", reason, self.settings.group,
                           pq.queue, m.msg_id)
            if self._return_failed(m, CONSUME_TIMEOUT_LEVEL, reason):
                pq.finish([m.queue_offset])
            else:
                pq.release([m.queue_offset])
            self.stats.add("timeouts")  # counted once its slot is freed or released


class OrderlyConsumeService(ConsumeService):
    """One thread at a time per queue, in offset order; a failure suspends the queue and
    consumes the same messages again locally; past the max they are dead-lettered (R12)."""

    def __init__(self, listener: OrderlyListener, settings: ConsumeSettings, **kw: Any) -> None:
        super().__init__(settings, **kw)
        self.listener = listener

    @property
    def max_reconsume(self) -> int:
        return max_reconsume_times_or(self.settings.max_reconsume_times,
                                      ORDERLY_MAX_RECONSUME_TIMES)

    def dispatch(self, pq: ProcessQueue, messages: list[Message]) -> None:
        pq.put(messages, orderly=True)
        self._kick(pq)

    def _kick(self, pq: ProcessQueue) -> None:
        if pq.dropped or self.stopped:
            return
        if pq.orderly_lock.acquire(blocking=False):
            self._submit(self._run, pq)

    def _run(self, pq: ProcessQueue) -> None:
        """Holds ``pq.orderly_lock`` (taken by :meth:`_kick`) only while it consumes: released
        when the queue has nothing more to consume, is suspended (R12) or its store lock is not
        held (DEC-orderly-queue-locks), so whoever takes it knows that no listener of the queue
        runs."""
        again_s: float | None = None
        try:
            while not (pq.dropped or self.stopped):
                wait_s = pq.suspended_until - time.monotonic()
                if wait_s > 0:
                    again_s = wait_s
                    break
                if not pq.lock_held():  # never without the queue lock (DEC-orderly-queue-locks)
                    self.stats.add("lock_waits")
                    again_s = LOCK_RECHECK_S
                    break
                batch = pq.take_ordered(max(self.settings.batch_size, 1))
                if not batch:
                    break
                suspend_ms = self._consume(pq, batch)
                if suspend_ms is not None:
                    pq.suspended_until = time.monotonic() + suspend_ms / 1000
        finally:
            pq.orderly_lock.release()
        if again_s is not None:
            self.timers.schedule(lambda: self._kick(pq), again_s)
        elif not (pq.dropped or self.stopped) and pq.ordered_waiting():
            self._kick(pq)

    def _consume(self, pq: ProcessQueue, batch: list[Message]) -> int | None:
        """Consume one batch; the suspend time in ms when it must be consumed again."""
        batch = pq.begin(batch)
        if not batch:
            return None
        view = [m.with_origin_topic() for m in batch]
        context = OrderlyContext(pq.queue)
        error: BaseException | None = None
        with self._span(pq, view) as span:
            try:
                result = self.listener(view, context) or OrderlyResult.SUCCESS
            except Exception as exc:
                logger.warning("orderly listener failed group=%s queue=%s msg_id=%s error=%s",
                               self.settings.group, pq.queue, batch[0].msg_id,
                               failure_reason(exc), exc_info=logger.isEnabledFor(logging.DEBUG))
                result, error = OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, exc
                span.record_exception(exc)
            span.set_attribute(telemetry.RESULT, str(result))
        if result == OrderlyResult.SUCCESS:
            self.stats.add("consumed", len(batch))
            pq.finish(m.queue_offset for m in batch)
            return None
        self.stats.add("failed", len(batch))
        reason = context.failure_reason or failure_reason(
            error, "listener returned SUSPEND_CURRENT_QUEUE_A_MOMENT")
        if self._give_up(pq, batch, reason):
            return None
        suspend_ms = context.suspend_current_queue_time_ms
        return suspend_ms if suspend_ms >= 0 else self.settings.suspend_time_ms

    def _give_up(self, pq: ProcessQueue, batch: list[Message], reason: str) -> bool:
        """RocketMQ ``checkReconsumeTimes``: a message already consumed max times more is
        dead-lettered; the others count one more attempt. True when the batch is done."""
        keep: list[Message] = []
        for m in batch:
            if m.reconsume_times >= self.max_reconsume:
                if self.settings.model == MessageModel.BROADCASTING:
                    logger.warning("orderly broadcasting consumer gave up (R14): skipped "
                                   "msg_id=%s reason=%s", m.msg_id, reason)
                    self.stats.add("skipped")
                    pq.finish([m.queue_offset])
                    continue
                try:
                    self.sendback.dead_letter(m, self.max_reconsume, reason)
                except ClepsydraError:
                    logger.exception("orderly dead-letter failed; suspending group=%s "
                                     "msg_id=%s", self.settings.group, m.msg_id)
                    keep.append(m)
                    continue
                self.stats.add("dead_lettered")
                pq.finish([m.queue_offset])
            else:
                keep.append(replace(m, reconsume_times=m.reconsume_times + 1))
        if not keep:
            return True
        self.stats.add("local_retry", len(keep))
        pq.put_back_ordered(keep)
        return False


def wait_idle(pq: ProcessQueue, timeout_s: float) -> bool:
    """Wait until no message of the queue is being consumed (or the timeout passes)."""
    deadline = time.monotonic() + timeout_s
    while pq.in_flight():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
