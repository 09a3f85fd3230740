"""The delivery core of one delay level: lease, progress, due decision, hand-over, sleep.

No Celery, no Redis, no HTTP here: a run receives the store client, the offset store and a
clock as arguments (``ports.py``), so unit tests drive it with in-memory twins and a virtual
clock. One run of :class:`LevelDelivery`:

1. takes the level's lease (one active deliverer per level, SPEC D1) -- free, handed on by the
   run before, or held by an older incarnation of this worker (DEC-scheduler-lease); else
   returns. The lease's token carries a fencing token that every hand-over sends the store;
2. reads the level's progress (missing = 0, D2) and puts it inside the queue (D8);
3. loops until its run period ends: reads the 20-byte entries from the progress on, decides
   how many are due (D3, with the correction for a shortened table), asks the store to hand
   over exactly those (D4, D7, D9 are the store's), saves the new progress only while it still
   holds the lease (fencing), and when the head is not due sleeps until its deliver time (D5);
   a failed store call keeps progress at the failed entry and retries it after a short back-off
   that doubles up to a cap (D6, DEC-scheduler-store-retry); a hand-over the store refuses as
   fenced re-fences the lease while this run still holds it, else ends the run;
4. ends with RUN_ENDED (the caller re-enqueues the next run and hands it the lease token),
   LEASE_LOST, or STOPPED (worker shutting down; lease released).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from opentelemetry import trace

from clepsydra_core.naming import schedule_queue_name
from clepsydra_core.runtime import telemetry
from clepsydra_core.schedule_rules import (
    corrected_deliver_ts,
    due_count,
    first_pending,
    resume_offset,
)
from clepsydra_core.wire.schedule import MAX_HANDOVER, HandoverAnswer
from clepsydra_scheduler.ports import (
    Clock,
    HandoverApi,
    LeaseToken,
    LevelSample,
    LevelState,
    LevelStateUnavailable,
    StoreCallFailed,
    WorkerIdentity,
    fence_of,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_tracer = telemetry.tracer("clepsydra_scheduler.delivery")
_GAUGE_INTERVAL_MS = 1_000
_RANGE_REFRESH_MS = 5_000
_MIN_WAIT_S = 0.001


class LeaseLost(Exception):
    """Internal: a fenced write found the lease held by another token."""


class RunOutcome(StrEnum):
    NOT_ACQUIRED = "not_acquired"
    """Another run holds the level's lease (or Redis is down): nothing done."""
    RUN_ENDED = "run_ended"
    """The run period is over; the lease is still held, for the next run to adopt."""
    LEASE_LOST = "lease_lost"
    """The lease expired or was taken over; the run stopped without saving further progress."""
    STOPPED = "stopped"
    """The worker is shutting down; the lease was released."""


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    level: int
    delay_ms: int
    run_s: float = 60.0
    lease_ms: int = 10_000
    batch: int = MAX_HANDOVER
    """Most entries read and handed over per store call: the store hands a large call over a
    chunk at a time (DEC-handover-lock-chunk), so a drain pays fewer round trips."""
    poll_ms: int = 1_000
    """Longest sleep when the queue is empty (also capped at half the level's delay, so an
    entry appended just after a read is seen before it falls due)."""
    backoff_s: float = 0.5
    """SPEC D6: the longest wait after failed store calls before retrying the same entry
    (the first waits ``retry_first_s``, each next one twice as long; DEC-scheduler-store-retry)."""
    retry_first_s: float = 0.1
    redis_retry_s: float = 0.5

    @property
    def renew_interval_s(self) -> float:
        return self.lease_ms / 3_000

    @property
    def idle_wait_s(self) -> float:
        return max(min(self.poll_ms, self.delay_ms // 2), 1) / 1_000


@dataclass(slots=True)
class RunReport:
    level: int
    token: str
    outcome: RunOutcome = RunOutcome.NOT_ACQUIRED
    start_offset: int = 0
    end_offset: int = 0
    delivered: int = 0
    parked: int = 0
    skipped: int = 0
    handovers: int = 0
    store_failures: int = 0
    corrections: list[tuple[int, int]] = field(default_factory=list)
    """D8 corrections made: (from, to)."""


@dataclass(slots=True)
class RetryDelay:
    """SPEC D6 back-off (DEC-scheduler-store-retry): after a failed store call the same work is
    tried again ``first_s`` later, each further failure doubling the wait up to ``cap_s``; a
    call that succeeds starts it over. A store that answers again is noticed within ``cap_s``."""

    cap_s: float
    first_s: float = 0.1
    _next_s: float = 0.0

    def next_s(self) -> float:
        wait = min(self._next_s or self.first_s, self.cap_s)
        self._next_s = min(wait * 2, self.cap_s) or self.first_s
        return wait

    def reset(self) -> None:
        self._next_s = 0.0


def at_run_start(call: Callable[[], T], handed: str | None, lease_ms: int, retry_s: float,
                 clock: Clock, what: str) -> T:
    """A Redis call at a run's start (taking the lease, reading the progress), ridden out as a
    running run rides out an outage shorter than its lease (DEC-scheduler-chain-rides-out).
    A run handed its chain's token (the run before it ended and enqueued it, or, the broker
    away, runs on in that task) holds the level: while Redis is away it tries again every
    ``retry_s``, for up to ``lease_ms``, instead of leaving the level until the lease expires
    and a keep-alive comes. ``handed`` is the token the run holds: its chain's when it takes
    the lease, the one it took when it reads the progress. A run that holds none yet (a
    keep-alive, a worker's first) gives up at once: the next keep-alive tries again. Raises
    LevelStateUnavailable when it gives up, or when the worker stops meanwhile."""
    started = clock.now_ms()
    while True:
        try:
            return call()
        except LevelStateUnavailable as exc:
            if handed is None or clock.now_ms() - started >= lease_ms:
                raise
            logger.warning("offset store unavailable at run start %s, trying again in %g s: %s",
                           what, retry_s, exc)
            if clock.wait(retry_s):
                raise


class SystemClock:
    """Wall time; ``wait`` returns early (True) when ``stop`` is set."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self._stop = stop or threading.Event()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait(self, timeout_s: float) -> bool:
        return self._stop.wait(max(timeout_s, 0.0))

    def stopping(self) -> bool:
        return self._stop.is_set()


class LevelDelivery:
    """One run of one level's delivery loop (see the module docstring)."""

    def __init__(self, config: DeliveryConfig, store: HandoverApi, state: LevelState,
                 clock: Clock, *, worker: WorkerIdentity,
                 tracer: trace.Tracer | None = None) -> None:
        self._cfg = config
        self._tracer = tracer or _tracer
        self._store = store
        self._state = state
        self._clock = clock
        self._worker = worker
        self._token = ""
        self._fence: int | None = None
        """The fencing token of the lease held, sent with every hand-over."""
        self._retry = RetryDelay(config.backoff_s, min(config.retry_first_s, config.backoff_s))
        self._report = RunReport(config.level, "")
        self._progress = 0
        self._window: list[int] = []
        self._window_offset = 0
        self._min_offset = 0
        self._max_offset = 0
        self._handed_over = -1
        self._range_checked = False
        self._retry_at_ms = 0
        self._last_renew_ms = 0
        self._last_gauges_ms = 0
        self._range_read_ms = 0
        self._stalled_head_ts: int | None = None
        """Deliver time of the entry at progress while store calls fail (for the lag gauge)."""
        self._unsaved = False
        self._backlog_due = False
        """The last hand-over delivered a whole batch: the next entries are likely due too, so
        the next one goes without reading entries first (the store re-checks due-ness, D5)."""

    # ---- the run -------------------------------------------------------------------------
    def run(self, token: str | None = None) -> RunReport:
        """Take the lease (``token``: the one the previous run of the chain hands on) and
        deliver until the run period ends. Never raises for store or Redis failures."""
        level = self._cfg.level
        self._report = RunReport(level, "")
        cfg, what = self._cfg, f"level={level}"
        try:
            run = LeaseToken.new_run()  # the same in every try: a lost answer is not a refusal
            taken = at_run_start(
                lambda: self._state.acquire(level, self._worker, cfg.lease_ms, token, run),
                token, cfg.lease_ms, cfg.redis_retry_s, self._clock, what)
            if taken is None:
                return self._report
            self._hold(taken)
            self._progress = at_run_start(lambda: self._state.load(level), taken, cfg.lease_ms,
                                          cfg.redis_retry_s, self._clock, what)
        except LevelStateUnavailable as exc:
            logger.warning("offset store unavailable at run start level=%d: %s", level, exc)
            return self._report
        now = self._clock.now_ms()
        self._last_renew_ms = now
        self._report.start_offset = self._progress
        outcome = self._loop(now + int(self._cfg.run_s * 1_000))
        self._report.outcome = outcome
        self._report.end_offset = self._progress
        if outcome is RunOutcome.STOPPED:
            self.release()
        report = self._report
        idle = not (report.delivered or report.parked or report.skipped)
        # an idle level's run says nothing at INFO (18 levels, one run a minute each)
        logger.log(logging.DEBUG if idle else logging.INFO,
                   "run finished level=%d outcome=%s start_offset=%d end_offset=%d "
                   "delivered=%d parked=%d skipped=%d handovers=%d", level, outcome,
                   report.start_offset, self._progress, report.delivered, report.parked,
                   report.skipped, report.handovers)
        return report

    def release(self) -> None:
        """Give the lease back (when the run will have no successor)."""
        try:
            self._state.release(self._cfg.level, self._token)
        except LevelStateUnavailable as exc:
            logger.warning("could not release lease level=%d: %s", self._cfg.level, exc)

    def _loop(self, deadline_ms: int) -> RunOutcome:
        while True:
            if self._clock.stopping():
                return RunOutcome.STOPPED
            now = self._clock.now_ms()
            if now >= deadline_ms:
                return RunOutcome.RUN_ENDED
            try:
                self._renew(now)
            except LeaseLost:
                return RunOutcome.LEASE_LOST
            except LevelStateUnavailable as exc:
                if now - self._last_renew_ms >= self._cfg.lease_ms:
                    logger.warning("lease lost level=%d: offset store down for %d ms",
                                   self._cfg.level, now - self._last_renew_ms)
                    return RunOutcome.LEASE_LOST
                logger.warning("offset store unavailable level=%d: %s", self._cfg.level, exc)
                self._pause(self._cfg.redis_retry_s, deadline_ms)
                continue
            try:
                wait_s = self._step(now)
            except LeaseLost:
                return RunOutcome.LEASE_LOST
            except LevelStateUnavailable as exc:
                logger.warning("offset store unavailable level=%d: %s", self._cfg.level, exc)
                self._unsaved = True
                wait_s = self._cfg.redis_retry_s
            self._pause(wait_s, deadline_ms)

    def _pause(self, wait_s: float, deadline_ms: int) -> None:
        if wait_s <= 0:
            return
        remaining_s = (deadline_ms - self._clock.now_ms()) / 1_000
        self._clock.wait(max(min(wait_s, self._cfg.renew_interval_s, remaining_s), 0.0))

    def _hold(self, token: str) -> None:
        self._token = self._report.token = token
        self._fence = fence_of(token)

    def _renew(self, now: int) -> None:
        level = self._cfg.level
        if not self._state.renew(level, self._token, self._cfg.lease_ms):
            # expired (a long pause) or gone (Redis restarted empty): free again, this run
            # takes it back with a new fence rather than leave the level to a keep-alive
            taken = self._state.acquire(level, self._worker, self._cfg.lease_ms)
            if taken is None:
                logger.warning("lease lost level=%d queue_offset=%d", level, self._progress)
                raise LeaseLost
            logger.warning("lease found free level=%d queue_offset=%d: taken again fence=%s",
                           level, self._progress, fence_of(taken))
            self._hold(taken)
            self._window = []
            self._range_checked = False
            self._backlog_due = False
        self._last_renew_ms = now
        if self._unsaved:
            self._save(self._progress)
            self._unsaved = False

    # ---- one iteration -------------------------------------------------------------------
    def _step(self, now: int) -> float:
        """Do what is due now; return how long to wait before the next iteration."""
        if now < self._retry_at_ms:
            return (self._retry_at_ms - now) / 1_000
        try:
            wait_s = self._store_step(now)
        except StoreCallFailed as exc:
            if exc.fenced:
                return self._fenced(exc)
            return self._store_failed(exc)
        self._retry.reset()
        return wait_s

    def _store_step(self, now: int) -> float:
        """:meth:`_step`'s store calls (StoreCallFailed when one fails)."""
        if not self._range_checked:
            self._check_range()
        if not self._window and self._backlog_due:
            self._backlog_due = False
            return self._hand_over(self._cfg.batch, self._clock.now_ms(), blind=True)
        if not self._window:
            self._read_entries()
            if not self._window:
                self._gauges(now)
                return self._cfg.idle_wait_s
        now = self._clock.now_ms()
        count = due_count(self._window, now, self._cfg.delay_ms, self._cfg.batch)
        if count == 0:
            self._gauges(now)
            return max((self._window[0] - now) / 1_000, _MIN_WAIT_S)
        return self._hand_over(count, now)

    def _fenced(self, exc: StoreCallFailed) -> float:
        """The store refused the hand-over's fencing token as older than one it has seen
        (DEC-scheduler-lease): re-fence above the store's newest while this run still holds the
        lease (its Redis lost the level's fence counter, or another Redis's scheduler delivers
        the level too), else the lease is someone else's: LeaseLost."""
        logger.warning("store refused the hand-over's fence level=%d fence=%s: %s",
                       self._cfg.level, self._fence, exc.message)
        self._window = []
        self._range_checked = False
        try:
            self._check_range()
        except StoreCallFailed as again:
            return self._store_failed(again)
        return 0.0

    def _store_failed(self, exc: StoreCallFailed) -> float:
        """SPEC D6: keep progress at the failed entry, retry it after the back-off."""
        self._report.store_failures += 1
        now = self._clock.now_ms()
        if self._window:
            self._stalled_head_ts = self._window[0]
        lag_ms = 0
        if self._stalled_head_ts is not None:
            head = corrected_deliver_ts(self._stalled_head_ts, now, self._cfg.delay_ms)
            lag_ms = max(now - head, 0)
        self._window = []
        self._range_checked = False  # a store that restarted may have recovered another mark
        if exc.offset_out_of_range:
            logger.warning("store says offset out of range level=%d queue_offset=%d: %s",
                           self._cfg.level, self._progress, exc.message)
            return self._cfg.idle_wait_s
        wait_s = self._retry.next_s()
        logger.warning("store call failed level=%d queue_offset=%d; retrying the same entry "
                       "in %.1fs: %s", self._cfg.level, self._progress, wait_s, exc.message)
        self._retry_at_ms = now + int(wait_s * 1_000)
        self._state.record(self._cfg.level, self._sample(now, lag_ms=lag_ms))
        return wait_s

    def _check_range(self) -> None:
        """Put progress inside the queue (D8) from the store's level table."""
        info = next((i for i in self._store.levels() if i.level == self._cfg.level), None)
        if info is None:
            raise StoreCallFailed(f"the store has no delay level {self._cfg.level}",
                                  error_code="LEVEL_NOT_FOUND")
        if info.fence is not None and self._fence is not None and info.fence > self._fence:
            self._refence(info.fence)
        self._learn_range(info.min_offset, info.max_offset, info.handed_over)
        self._range_checked = True

    def _refence(self, store_fence: int) -> None:
        """The store has seen a newer fence than this lease's: take one above it, if the lease
        is still this run's (DEC-scheduler-lease); LeaseLost otherwise."""
        level = self._cfg.level
        token = self._state.refence(level, self._token, store_fence, self._cfg.lease_ms)
        if token is None:
            logger.warning("lease lost level=%d: the store has seen fence %d, this run's is %s",
                           level, store_fence, self._fence)
            raise LeaseLost
        logger.warning("fence raised level=%d from=%s to=%s (the store had seen %d: this "
                       "worker's Redis lost its fence counter, or another scheduler delivers "
                       "the level)", level, self._fence, fence_of(token), store_fence)
        self._hold(token)

    def _read_entries(self) -> None:
        entries = self._store.entries(self._cfg.level, self._progress, self._cfg.batch)
        if self._learn_range(entries.min_offset, entries.max_offset, entries.handed_over):
            return  # progress moved: read again from there
        if entries.queue_offset != self._progress:
            logger.warning("store read entries from another offset level=%d asked=%d got=%d",
                           self._cfg.level, self._progress, entries.queue_offset)
            self._set_progress(entries.queue_offset, "store")
        self._window = list(entries.deliver_ts)
        self._window_offset = self._progress
        self._range_read_ms = self._clock.now_ms()
        self._stalled_head_ts = None

    def _learn_range(self, min_offset: int, max_offset: int, handed_over: int) -> bool:
        """Remember the queue's range and the store's handed-over mark; apply SPEC D8, and
        D9 both ways: behind the mark moves forward, ahead of ``mark + 1`` (a store recovered
        to an earlier mark after a crash) steps back. True if progress was moved."""
        self._min_offset, self._max_offset = min_offset, max_offset
        self._handed_over = handed_over
        level, progress = self._cfg.level, self._progress
        resume = first_pending(handed_over, min_offset)
        if progress > max_offset:
            target = resume_offset(handed_over, min_offset, max_offset)
            logger.warning("progress above the queue maximum level=%d progress=%d "
                           "max_offset=%d: moving to %d (SPEC D8)", level, progress,
                           max_offset, target)
            self._set_progress(target, "D8")
            return True
        if progress > resume and resume <= max_offset:
            logger.warning("progress ahead of the store's handed-over mark level=%d "
                           "progress=%d handed_over=%d: stepping back to %d (SPEC D8, D9)",
                           level, progress, handed_over, resume)
            self._set_progress(resume, "D8")
            return True
        if progress < min_offset:
            logger.warning("progress below the queue minimum level=%d progress=%d "
                           "min_offset=%d: moving to %d (SPEC D8)", level, progress,
                           min_offset, min_offset)
            self._set_progress(min_offset, "D8")
            return True
        if progress <= self._handed_over < max_offset:
            logger.info("entries already handed over level=%d progress=%d handed_over=%d: "
                        "moving to %d (SPEC D9)", level, progress, self._handed_over, resume)
            self._set_progress(resume, "D9")  # handed_over + 1: progress >= min_offset here
            return True
        return False

    def _set_progress(self, queue_offset: int, why: str) -> None:
        if why == "D8":
            self._report.corrections.append((self._progress, queue_offset))
        self._save(queue_offset)
        self._progress = queue_offset
        self._window = []

    def _save(self, queue_offset: int) -> None:
        if not self._state.save(self._cfg.level, self._token, queue_offset):
            raise LeaseLost

    def _hand_over(self, count: int, now: int, *, blind: bool = False) -> float:
        """Hand ``count`` entries from progress over (``blind``: without having read them; the
        store stops at the first one not due)."""
        level, from_offset = self._cfg.level, self._progress
        with self._tracer.start_as_current_span("scheduler.deliver",
                                                kind=trace.SpanKind.PRODUCER, attributes={
            telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM,
            telemetry.OPERATION_TYPE: telemetry.SEND,
            telemetry.DELAY_LEVEL: level,
            telemetry.DESTINATION: schedule_queue_name(level),
            telemetry.FROM_OFFSET: from_offset,
            telemetry.COUNT: count,
        }) as span:
            headers: dict[str, str] = {}
            telemetry.inject(headers)
            result = self._store.handover(level, from_offset, count, headers, self._fence)
            span.set_attributes({
                telemetry.NEXT_OFFSET: result.next_offset,
                telemetry.DELIVERED: result.delivered,
                telemetry.PARKED: result.parked,
                telemetry.SKIPPED: result.skipped,
                telemetry.BATCH_COUNT: result.delivered,
            })
            if not (result.delivered or result.parked or result.skipped):
                telemetry.mark_idle(span)  # nothing was due: not exported (SPEC O1)
        self._record_handover(result)
        advanced = result.next_offset - from_offset
        self._advance_window(result.next_offset)
        # The store has handed over up to next_offset (durably): that is our progress now,
        # whether or not Redis takes it (an unsaved offset is saved after the next renewal).
        self._progress = result.next_offset
        now = self._clock.now_ms()
        sample = self._sample(now, result)
        if not self._state.commit(level, self._token, result.next_offset, sample):
            logger.warning("lease lost before saving progress level=%d queue_offset=%d",
                           level, result.next_offset)
            raise LeaseLost
        if result.not_due and advanced < count:
            # The store's clock says an entry we saw as due is not: trust its deliver time.
            self._window = []
            target = result.next_deliver_ts if result.next_deliver_ts is not None else now + 1
            return max((target - now) / 1_000, _MIN_WAIT_S)
        if advanced <= 0:
            if blind:
                return 0.0  # nothing more was due or stored: read entries next time
            logger.warning("hand-over made no progress level=%d queue_offset=%d",
                           level, from_offset)
            return self._cfg.idle_wait_s
        self._backlog_due = advanced >= self._cfg.batch and not result.not_due
        return 0.0

    def _record_handover(self, result: HandoverAnswer) -> None:
        self._report.handovers += 1
        self._report.delivered += result.delivered
        self._report.parked += result.parked
        self._report.skipped += result.skipped
        self._handed_over = result.handed_over
        self._max_offset = max(self._max_offset, result.next_offset)

    def _advance_window(self, next_offset: int) -> None:
        drop = next_offset - self._window_offset
        if 0 <= drop <= len(self._window):
            del self._window[:drop]
            self._window_offset = next_offset
        else:
            self._window = []

    def _sample(self, now: int, result: HandoverAnswer | None = None,
                lag_ms: int | None = None) -> LevelSample:
        if lag_ms is None:
            lag_ms = 0
            if self._window:
                head = corrected_deliver_ts(self._window[0], now, self._cfg.delay_ms)
                lag_ms = max(now - head, 0)
            elif result is not None and result.lateness_ms and not result.not_due:
                # draining without a window: the next head is due no earlier than the last
                # delivered entry, so that entry's lateness bounds the lag from above
                lag_ms = max(result.lateness_ms[-1], 0)
        self._last_gauges_ms = now
        return LevelSample(
            delivered=result.delivered if result else 0,
            parked=result.parked if result else 0,
            skipped=result.skipped if result else 0,
            lateness_ms=result.lateness_ms if result else (),
            backlog=max(self._max_offset - self._handed_over - 1, 0),
            lag_ms=lag_ms,
            min_offset=self._min_offset,
            max_offset=self._max_offset,
            handed_over=self._handed_over,
            now_ms=now,
        )

    def _gauges(self, now: int) -> None:
        """Record the gauges of an idle iteration (at most every second); while waiting for
        a head that is not due, learn the queue's new maximum every few seconds so the
        backlog gauge follows what is being stored behind it."""
        if now - self._last_gauges_ms < _GAUGE_INTERVAL_MS:
            return
        if self._window and now - self._range_read_ms >= _RANGE_REFRESH_MS:
            self._range_read_ms = now
            head = self._store.entries(self._cfg.level, self._progress, 1)
            self._max_offset = max(self._max_offset, head.max_offset)
            self._handed_over = head.handed_over
        sample = self._sample(now)
        self._state.record(self._cfg.level, sample)
