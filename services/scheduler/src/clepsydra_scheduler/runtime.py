"""What a worker process holds for its level tasks: settings, the Redis offset store, its
identity in the leases (DEC-scheduler-lease), the stop flag set at shutdown, and the glue that
runs one level's delivery and chains the next run."""

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
from clepsydra_scheduler.ports import LevelStateUnavailable, WorkerIdentity
from clepsydra_scheduler.settings import SchedulerSettings
from clepsydra_scheduler.timer_delivery import TimerConfig, TimerDelivery, TimerRunReport

logger = logging.getLogger(__name__)

Requeue = Callable[[str], None]
"""Enqueue the level's next run, handing it the lease token."""


class SchedulerRuntime:
    def __init__(self, settings: SchedulerSettings,
                 ready: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self.ready = ready or threading.Event()
        """Set while the worker consumes its queues (its /healthz says so)."""
        self._lock = threading.Lock()
        self._state: RedisLevelState | None = None
        self._worker_lock = threading.Lock()
        self._worker: WorkerIdentity | None = None

    @property
    def level_state(self) -> RedisLevelState:
        with self._lock:
            if self._state is None:
                self._state = RedisLevelState.from_url(self.settings.common.effective_redis_url)
            return self._state

    @property
    def worker(self) -> WorkerIdentity:
        """This process in the leases (DEC-scheduler-lease): the settings' worker name and an
        incarnation number taken from Redis once (LevelStateUnavailable while it is away)."""
        with self._worker_lock:
            if self._worker is None:
                self._worker = WorkerIdentity(self.settings.worker_name,
                                              self.level_state.incarnation())
                logger.info("scheduler worker name=%s incarnation=%d", self._worker.name,
                            self._worker.incarnation)
            return self._worker

    def delivery_config(self, level: int) -> DeliveryConfig:
        s = self.settings
        return DeliveryConfig(level=level, delay_ms=s.levels.delay_ms(level), run_s=s.run_s,
                              lease_ms=s.lease_ms, batch=s.batch, poll_ms=s.poll_ms,
                              backoff_s=s.backoff_s)

    def _identity(self, what: str) -> WorkerIdentity | None:
        try:
            return self.worker
        except LevelStateUnavailable as exc:
            logger.warning("offset store unavailable at run start %s: %s", what, exc.message)
            return None

    def deliver(self, level: int, token: str | None, requeue: Requeue) -> str:
        """One run of a level (the body of the ``deliver_level`` task)."""
        if level not in self.settings.levels.levels():
            logger.error("no such delay level level=%d (table: %s)", level, self.settings.levels)
            return "unknown_level"
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        worker = self._identity(f"level={level}")
        if worker is None:
            return RunOutcome.NOT_ACQUIRED.value
        store = HttpHandoverApi(self.settings.common.store_url,
                                timeout_s=self.settings.store_timeout_s)
        try:
            while True:
                delivery = LevelDelivery(self.delivery_config(level), store, self.level_state,
                                         SystemClock(self.stop), worker=worker)
                report = delivery.run(token)
                if not self._chain(delivery, report, requeue, f"level={level}"):
                    return report.outcome.value
                token = report.token
        finally:
            store.close()

    def deliver_timers(self, token: str | None, requeue: Requeue) -> str:
        """One run of the timers' delivery (the body of the ``deliver_timers`` task)."""
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        worker = self._identity("timers")
        if worker is None:
            return RunOutcome.NOT_ACQUIRED.value
        s = self.settings
        store = HttpHandoverApi(s.common.store_url, timeout_s=s.store_timeout_s)
        try:
            while True:
                delivery = TimerDelivery(TimerConfig(run_s=s.run_s, lease_ms=s.lease_ms,
                                                     batch=s.batch, backoff_s=s.backoff_s,
                                                     interval_ms=s.timer_interval_ms),
                                         store, RedisTimerLease(self.level_state),
                                         SystemClock(self.stop), worker=worker)
                report = delivery.run(token)
                if not self._chain(delivery, report, requeue, "timers"):
                    return report.outcome.value
                token = report.token
        finally:
            store.close()

    def _chain(self, delivery: LevelDelivery | TimerDelivery,
               report: RunReport | TimerRunReport,
               requeue: Requeue, what: str) -> bool:
        """After a run: a run that ended hands its lease token to the next run (requeued);
        when the next run cannot be enqueued (the broker away) it runs here, in this task
        (True), rather than leave the level to a keep-alive; stopping releases the lease."""
        if report.outcome is not RunOutcome.RUN_ENDED:
            return False
        if self.stop.is_set():
            delivery.release()
            return False
        try:
            requeue(report.token)
        except Exception:
            logger.exception("could not enqueue the next run %s; it runs in this task", what)
            return not self.stop.is_set()
        return False
