"""The Celery tasks: ``deliver_level(level, token=None)`` and ``deliver_timers(token=None)``
(issue 15) - thin; the work is in delivery.py and timer_delivery.py.

A run returns at once when another run holds the level's lease (a beat keep-alive while the
level is being served). At the end of its run period it enqueues its successor on its own
level queue, handing over the lease token, so delivery has no gap; beat's keep-alives only
matter when a worker died (its lease expires, the next keep-alive starts a new run).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from clepsydra_core.naming import TIMER_QUEUE_NAME, schedule_queue_name
from clepsydra_scheduler.runtime import SchedulerRuntime

TASK_NAME = "clepsydra_scheduler.deliver_level"
TIMER_TASK_NAME = "clepsydra_scheduler.deliver_timers"


def register(app: Celery, runtime: SchedulerRuntime) -> Any:
    """Register ``deliver_level`` on ``app``; returns the task."""
    expires_s = runtime.settings.lease_s

    @app.task(name=TASK_NAME, bind=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def deliver_level(self: Any, level: int, token: str | None = None) -> str:
        def requeue(next_token: str) -> None:
            self.apply_async(args=(level,), kwargs={"token": next_token},
                             queue=schedule_queue_name(level), expires=expires_s)

        return runtime.deliver(level, token, requeue)

    @app.task(name=TIMER_TASK_NAME, bind=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def deliver_timers(self: Any, token: str | None = None) -> str:
        def requeue(next_token: str) -> None:
            self.apply_async(kwargs={"token": next_token}, queue=TIMER_QUEUE_NAME,
                             expires=expires_s)

        return runtime.deliver_timers(token, requeue)

    return deliver_level


def kick(app: Celery, runtime: SchedulerRuntime) -> None:
    """Start every level now (a worker at start-up), without waiting for beat's first tick: a
    restarted worker takes its own leases back with these (DEC-scheduler-lease). The worker
    starts them one after another (tens of ms each on a busy machine), so the timers (T1: within
    100 ms) go first, then the levels in the table's order."""
    app.send_task(TIMER_TASK_NAME, queue=TIMER_QUEUE_NAME, expires=runtime.settings.keepalive_s)
    for level in runtime.settings.levels.levels():
        app.send_task(TASK_NAME, args=(level,), queue=schedule_queue_name(level),
                      expires=runtime.settings.keepalive_s)
