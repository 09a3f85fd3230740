"""The Celery tasks: ``deliver_level(level, token=None, shard=None)`` and
``deliver_timers(token=None, shard=None)`` (``shard``: a store shard's run, DEC-store-shards;
none named: beat's keep-alive, shard 0's run that first starts the other shards' runs) - thin;
the work is in delivery.py and timer_delivery.py.

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

    keepalive_s = runtime.settings.keepalive_s

    @app.task(name=TASK_NAME, bind=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def deliver_level(self: Any, level: int, token: str | None = None,
                      shard: int | None = None) -> str:
        def requeue(next_token: str) -> None:
            self.apply_async(args=(level,), kwargs=_shard_kwargs(shard or 0, token=next_token),
                             queue=schedule_queue_name(level), expires=expires_s)

        def kick(other: int) -> None:  # a keep-alive of another store shard's run
            self.apply_async(args=(level,), kwargs={"shard": other},
                             queue=schedule_queue_name(level), expires=keepalive_s)

        return runtime.deliver(level, token, requeue, shard, kick)

    @app.task(name=TIMER_TASK_NAME, bind=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def deliver_timers(self: Any, token: str | None = None, shard: int | None = None) -> str:
        def requeue(next_token: str) -> None:
            self.apply_async(kwargs=_shard_kwargs(shard or 0, token=next_token),
                             queue=TIMER_QUEUE_NAME, expires=expires_s)

        def kick(other: int) -> None:
            self.apply_async(kwargs={"shard": other}, queue=TIMER_QUEUE_NAME,
                             expires=keepalive_s)

        return runtime.deliver_timers(token, requeue, shard, kick)

    return deliver_level


def _shard_kwargs(shard: int, **kwargs: Any) -> dict[str, Any]:
    """A run's keyword arguments: shard 0's are those of a one-store stack (no ``shard``)."""
    return {**kwargs, "shard": shard} if shard else kwargs


def kick(app: Celery, runtime: SchedulerRuntime) -> None:
    """Start every level now (a worker at start-up), without waiting for beat's first tick: a
    restarted worker takes its own leases back with these (DEC-scheduler-lease). The worker
    takes its tasks one after another (its consumer, tens of ms each on a busy machine), so
    the timers (T1: within 100 ms) go first, then the levels in the table's order; each names
    its store shard, every shard's run sent at once (DEC-store-shards): none waits for shard
    0's run to start it, and no run is sent twice (DEC-scheduler-restart-kick). When the
    cluster's membership cannot be read, shard 0's runs are sent naming no shard, as beat's
    keep-alives: each starts the other shards' runs that need one."""
    shards = runtime.shards
    runs = [{"shard": s} for s in shards.ids()] if shards.refresh() else [{}]
    expires_s = runtime.settings.keepalive_s
    for kwargs in runs:
        app.send_task(TIMER_TASK_NAME, kwargs=kwargs, queue=TIMER_QUEUE_NAME, expires=expires_s)
    for level in runtime.settings.levels.levels():
        for kwargs in runs:
            app.send_task(TASK_NAME, args=(level,), kwargs=kwargs,
                          queue=schedule_queue_name(level), expires=expires_s)
