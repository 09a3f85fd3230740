"""What a worker process holds for its level tasks: settings, the Redis offset store, the stop
flag set at shutdown, and the glue that runs one level's delivery and chains the next run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clepsydra_scheduler.delivery import (
    DeliveryConfig,
    LevelDelivery,
    RunOutcome,
    RunReport,
    SystemClock,
)
from clepsydra_scheduler.handover_client import HttpHandoverApi
from clepsydra_scheduler.level_state import RedisLevelState, RedisTimerLease
from clepsydra_scheduler.settings import SchedulerSettings
from clepsydra_scheduler.timer_delivery import TimerConfig, TimerDelivery, TimerRunReport

logger = logging.getLogger(__name__)

Requeue = Callable[[str], None]
"""Enqueue the level's next run, handing it the lease token."""


class SchedulerRuntime:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._state: RedisLevelState | None = None

    @property
    def level_state(self) -> RedisLevelState:
        with self._lock:
            if self._state is None:
                self._state = RedisLevelState.from_url(self.settings.common.effective_redis_url)
            return self._state

    def delivery_config(self, level: int) -> DeliveryConfig:
        s = self.settings
        return DeliveryConfig(level=level, delay_ms=s.levels.delay_ms(level), run_s=s.run_s,
                              lease_ms=s.lease_ms, batch=s.batch, poll_ms=s.poll_ms,
                              backoff_s=s.backoff_s)

    def deliver(self, level: int, token: str | None, requeue: Requeue) -> str:
        """One run of a level (the body of the ``deliver_level`` task)."""
        if level not in self.settings.levels.levels():
            logger.error("no such delay level level=%d (table: %s)", level, self.settings.levels)
            return "unknown_level"
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        store = HttpHandoverApi(self.settings.common.store_url,
                                timeout_s=self.settings.store_timeout_s)
        try:
            delivery = LevelDelivery(self.delivery_config(level), store, self.level_state,
                                     SystemClock(self.stop))
            report = delivery.run(token)
        finally:
            store.close()
        return self._chain(delivery, report, requeue, f"level={level}")

    def deliver_timers(self, token: str | None, requeue: Requeue) -> str:
        """One run of the timers' delivery (the body of the ``deliver_timers`` task)."""
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        s = self.settings
        store = HttpHandoverApi(s.common.store_url, timeout_s=s.store_timeout_s)
        try:
            delivery = TimerDelivery(TimerConfig(run_s=s.run_s, lease_ms=s.lease_ms,
                                                 batch=s.batch, backoff_s=s.backoff_s,
                                                 interval_ms=s.timer_interval_ms),
                                     store, RedisTimerLease(self.level_state),
                                     SystemClock(self.stop))
            report = delivery.run(token)
        finally:
            store.close()
        return self._chain(delivery, report, requeue, "timers")

    def _chain(self, delivery: LevelDelivery | TimerDelivery,
               report: RunReport | TimerRunReport,
               requeue: Requeue, what: str) -> str:
        """After a run: a run that ended hands its lease token to the next run (requeued), or
        releases the lease when stopping or when the next run cannot be enqueued."""
        if report.outcome is RunOutcome.RUN_ENDED:
            if self.stop.is_set():
                delivery.release()
                return RunOutcome.STOPPED.value
            try:
                requeue(report.token)
            except Exception:
                logger.exception("could not enqueue the next run %s; releasing the lease "
                                 "(beat's keep-alive restarts it)", what)
                delivery.release()
        return report.outcome.value
