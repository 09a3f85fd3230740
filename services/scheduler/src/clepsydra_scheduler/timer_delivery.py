"""The timers' delivery core (SPEC T1-T2), like a level's (delivery.py) without the
progress offset: the store's timer index knows what is due, and its hand-over is exactly-once
by itself (a timer-log entry handed over is marked by its copy's append, D9).

A run holds the timers' lease (``naming.TIMER_LEASE_KEY``) and calls the store's timer
hand-over in a loop. The call waits in the store, up to ``wait_ms``, until the next timer falls
due (or one due earlier is parked), so the run needs no clock of its own to be on time: the
store hands each timer over as soon as it is due and never before. Between calls the lease is
renewed once a third of it has passed (``TimerConfig.renew_ms``; not before every call,
DEC-timer-handover-gap); a failed call waits a short back-off, doubling up to ``backoff_s`` (D6,
DEC-scheduler-store-retry), and tries again (nothing is skipped: the store keeps every pending
timer). The lease is taken, handed on and fenced as a level's (DEC-scheduler-lease): every call
carries the lease's fencing token, and a call the store refuses as fenced re-fences the lease
while the run still holds it, else ends the run. After ``run_s`` the run ends with the lease
held, for its successor to adopt (the same chaining as the levels).

While timers keep falling due, a call that returned some (fewer than a full batch) is followed
by the next one ``interval_ms`` after it (DEC-timer-call-interval): that call takes everything
that fell due meanwhile, so the store answers one call every ``interval_ms`` instead of one per
millisecond's worth of timers. A call that returned a full batch (a backlog) is followed at
once, and one that returned nothing was the store's wait for the next due timer: no pause.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from clepsydra_core.wire.timers import MAX_TIMER_HANDOVER, TimerHandoverAnswer
from clepsydra_scheduler.delivery import RetryDelay, RunOutcome, at_run_start
from clepsydra_scheduler.ports import (
    Clock,
    LeaseToken,
    LevelStateUnavailable,
    StoreCallFailed,
    WorkerIdentity,
    fence_of,
)

logger = logging.getLogger(__name__)


class TimerApi(Protocol):
    """The store's timer hand-over route; raises StoreCallFailed when it fails."""

    def timer_handover(self, max_count: int, wait_ms: int,
                       fence: int | None = None) -> TimerHandoverAnswer: ...

    def timer_fence(self) -> int | None:
        """The newest fencing token the store has seen on the timers' hand-over."""
        ...


class TimerLease(Protocol):
    """The timers' lease (Redis in production): one run delivers timers at a time. Taken,
    handed on and fenced as a level's (``LevelState.acquire``, ``refence``)."""

    def acquire(self, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None: ...

    def refence(self, token: str, floor: int, ttl_ms: int) -> str | None: ...

    def renew(self, token: str, ttl_ms: int) -> bool: ...

    def release(self, token: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class TimerConfig:
    run_s: float = 60.0
    lease_ms: int = 10_000
    batch: int = MAX_TIMER_HANDOVER
    backoff_s: float = 0.5
    """The longest D6 back-off (DEC-scheduler-store-retry; the first is ``retry_first_s``)."""
    retry_first_s: float = 0.1
    interval_ms: int = 0
    """The next call after one that returned timers (not a full batch) comes this long after
    it (``CLEPSYDRA_SCHEDULER_TIMER_INTERVAL_MS``; module docstring)."""

    @property
    def renew_ms(self) -> int:
        """The lease is renewed once a third of it has passed since it was last taken or
        renewed (DEC-timer-handover-gap: not before every call, ~530 Redis round trips a second
        while timers fall due). A call waits at most :attr:`wait_ms` (a quarter of the lease),
        so a run renews with over a third of its lease left; the hand-over itself is exactly-once in
        the store (D9), the lease only keeps one run calling (D1)."""
        return self.lease_ms // 3

    @property
    def redis_retry_s(self) -> float:
        """How long a run waits before it tries Redis again after a failed lease call."""
        return min(self.backoff_s, self.lease_ms / 3_000)

    @property
    def wait_ms(self) -> int:
        """How long one hand-over call may wait in the store: well inside the lease."""
        return max(1, min(1_000, self.lease_ms // 4))


@dataclass(slots=True)
class TimerRunReport:
    token: str
    outcome: RunOutcome = RunOutcome.NOT_ACQUIRED
    delivered: int = 0
    parked: int = 0
    handovers: int = 0
    renewals: int = 0
    store_failures: int = 0
    max_lateness_ms: int = 0


class TimerDelivery:
    def __init__(self, config: TimerConfig, store: TimerApi, lease: TimerLease,
                 clock: Clock, *, worker: WorkerIdentity) -> None:
        self._cfg = config
        self._store = store
        self._lease = lease
        self._clock = clock
        self._worker = worker
        self._report = TimerRunReport("")
        self._next_call_ms = 0
        self._retry = RetryDelay(config.backoff_s, min(config.retry_first_s, config.backoff_s))

    def release(self) -> None:
        if self._report.token:
            try:
                self._lease.release(self._report.token)
            except LevelStateUnavailable:
                pass

    def run(self, token: str | None = None) -> TimerRunReport:
        """Take the lease (``token``: the one the previous run of the chain hands on) and
        deliver until the run period ends."""
        report = self._report = TimerRunReport("")
        cfg = self._cfg
        try:
            run = LeaseToken.new_run()  # the same in every try: a lost answer is not a refusal
            taken = at_run_start(
                lambda: self._lease.acquire(self._worker, cfg.lease_ms, token, run),
                token, cfg.lease_ms, cfg.redis_retry_s, self._clock, "timers")
        except LevelStateUnavailable as exc:
            logger.warning("timers: lease not taken: %s", exc.message)
            return report
        if taken is None:
            return report
        report.token = taken
        end = time.monotonic() + cfg.run_s
        renewed = self._clock.now_ms()
        while True:
            if self._clock.stopping():
                self.release()
                report.outcome = RunOutcome.STOPPED
                break
            if time.monotonic() >= end:
                report.outcome = RunOutcome.RUN_ENDED
                break
            since = self._clock.now_ms() - renewed
            if since >= cfg.renew_ms or since < 0:  # (< 0: the wall clock stepped back)
                try:
                    if not self._lease.renew(report.token, cfg.lease_ms) and \
                            not self._take_again():
                        report.outcome = RunOutcome.LEASE_LOST
                        break
                except LevelStateUnavailable as exc:
                    logger.warning("timers: lease not renewed: %s", exc.message)
                    self._clock.wait(cfg.redis_retry_s)
                    continue
                renewed = self._clock.now_ms()
                report.renewals += 1
            if not self._handover():
                report.outcome = RunOutcome.LEASE_LOST
                break
        if report.delivered or report.parked or report.store_failures:
            logger.info("run finished timers delivered=%d parked=%d handovers=%d "
                        "store_failures=%d max_lateness_ms=%d outcome=%s", report.delivered,
                        report.parked, report.handovers, report.store_failures,
                        report.max_lateness_ms, report.outcome.value)
        return report

    def _take_again(self) -> bool:
        """The lease was not renewed: take it again if it is free (it expired, or Redis
        restarted empty), with a new fence; False when another run holds it."""
        taken = self._lease.acquire(self._worker, self._cfg.lease_ms)
        if taken is None:
            return False
        logger.warning("timers: lease found free: taken again fence=%s", fence_of(taken))
        self._report.token = taken
        return True

    def _handover(self) -> bool:
        """One hand-over call; False when the lease turned out to be someone else's."""
        report, cfg = self._report, self._cfg
        early_ms = self._next_call_ms - self._clock.now_ms()
        if early_ms > 0 and self._clock.wait(early_ms / 1000):
            return True  # stopping: the loop sees it next
        try:
            answer = self._store.timer_handover(cfg.batch, cfg.wait_ms,
                                                fence_of(report.token))
        except StoreCallFailed as exc:
            if exc.fenced:
                return self._refence(exc)
            report.store_failures += 1
            wait_s = self._retry.next_s()
            logger.warning("timers: hand-over failed, retrying in %.1fs (D6): %s",
                           wait_s, exc.message)
            self._clock.wait(wait_s)
            return True
        self._retry.reset()
        report.handovers += 1
        report.delivered += answer.delivered
        report.parked += answer.parked
        taken = answer.delivered + answer.parked
        self._next_call_ms = (self._clock.now_ms() + cfg.interval_ms
                              if 0 < taken < cfg.batch else 0)
        if answer.lateness_ms:
            report.max_lateness_ms = max(report.max_lateness_ms, max(answer.lateness_ms))
        return True

    def _refence(self, exc: StoreCallFailed) -> bool:
        """The store refused the call's fence (DEC-scheduler-lease): take one above the
        store's newest while the lease is still this run's; False when it is not."""
        logger.warning("timers: the store refused the hand-over's fence %s: %s",
                       fence_of(self._report.token), exc.message)
        try:
            floor = self._store.timer_fence()
        except StoreCallFailed as again:
            self._report.store_failures += 1
            self._clock.wait(self._retry.next_s())
            logger.warning("timers: the store's fence not read: %s", again.message)
            return True
        try:
            token = self._lease.refence(self._report.token, floor or 0, self._cfg.lease_ms)
        except LevelStateUnavailable as down:
            logger.warning("timers: fence not raised: %s", down.message)
            self._clock.wait(self._cfg.lease_ms / 3_000)
            return True
        if token is None:
            return False
        logger.warning("timers: fence raised from=%s to=%s (the store had seen %s)",
                       fence_of(self._report.token), fence_of(token), floor)
        self._report.token = token
        return True
