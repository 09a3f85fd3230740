"""The scheduler's Celery app: Redis broker, one beat keep-alive per delay level, each routed to
its own queue ``schedule.level.<n>``.

Beat ticks are keep-alives, not the clock: a send costs beat ~3.7 ms CPU (measured on the
2-core machine), so each level gets one every ``keepalive_s`` (default 5 s; 18 levels = 3.6
sends/s, ~1 % of a core), expiring after the same interval so a backlog of stale keep-alives
is dropped, never run.
Precision comes from the level task sleeping until the next deliver time (delivery.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, signals

from clepsydra_core.naming import TIMER_QUEUE_NAME, schedule_queue_name
from clepsydra_core.runtime import logging as clepsydra_logging
from clepsydra_core.runtime import telemetry
from clepsydra_scheduler import tasks
from clepsydra_scheduler.runtime import SchedulerRuntime
from clepsydra_scheduler.settings import SchedulerSettings

logger = logging.getLogger(__name__)

SERVICE_NAME = telemetry.SCHEDULER_SERVICE
_CHATTY_LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat")


def beat_schedule(settings: SchedulerSettings) -> dict[str, dict[str, Any]]:
    """One entry per level: ``deliver_level(n)`` on queue ``schedule.level.<n>``; one for the
    timers: ``deliver_timers()`` on queue ``schedule.timers`` (SPEC T1)."""
    timers = {"deliver-timers": {
        "task": tasks.TIMER_TASK_NAME, "schedule": settings.keepalive_s,
        "options": {"queue": TIMER_QUEUE_NAME, "expires": settings.keepalive_s}}}
    return timers | {
        f"deliver-level-{level}": {
            "task": tasks.TASK_NAME,
            "schedule": settings.keepalive_s,
            "args": (level,),
            "options": {"queue": schedule_queue_name(level), "expires": settings.keepalive_s},
        }
        for level in settings.levels.levels()
    }


BROKER_TRANSPORT_OPTIONS = {"queue_order_strategy": "priority", "ack_emulation": False}
"""DEC-scheduler-restart-kick: the worker takes its tasks from the first queue of
:func:`level_queues` that has one (Kombu's "priority" order, not its round robin), so a
restarted worker starts its runs the shortest delay first, every shard's together; and kombu
keeps no copy of a task taken (its ack emulation): a task is acknowledged as it starts
(``task_acks_late=False``), and one lost with a dying worker is made up by beat's keep-alives
(kombu would restore its copy only after its visibility timeout, an hour)."""


def level_queues(settings: SchedulerSettings) -> list[str]:
    """Every queue a worker consumes, in the order it takes their tasks
    (DEC-scheduler-restart-kick): the timers' (T1: within 100 ms), then one per level, the
    shortest delay first."""
    return [TIMER_QUEUE_NAME] + [schedule_queue_name(level)
                                 for level in settings.levels.levels()]


def create_celery(settings: SchedulerSettings,
                  ready: threading.Event | None = None) -> Celery:
    """The app; ``ready`` is set while its worker consumes its queues (the worker's /healthz
    answers 200 only then)."""
    runtime = SchedulerRuntime(settings, ready)
    app = Celery("clepsydra_scheduler", broker=settings.common.effective_redis_url,
                 set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_ignore_result=True,
        task_create_missing_queues=True,
        task_default_queue=schedule_queue_name(1),
        task_acks_late=False,
        broker_transport_options=BROKER_TRANSPORT_OPTIONS,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        **clepsydra_logging.CELERY_SERIALIZERS,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_send_task_events=False,
        worker_enable_remote_control=False,
        beat_schedule=beat_schedule(settings),
        beat_max_loop_interval=max(settings.keepalive_s, 1.0),
        timezone="UTC",
        enable_utc=True,
    )
    tasks.register(app, runtime)
    _connect_signals(app, runtime)
    return app


def _connect_signals(app: Celery, runtime: SchedulerRuntime) -> None:
    settings = runtime.settings

    def setup_logging(**_: Any) -> None:
        clepsydra_logging.configure_from(settings.common, SERVICE_NAME)
        clepsydra_logging.quiet_celery_root_warning()
        if logging.getLogger().level > logging.DEBUG:
            # One line per keep-alive received / finished / sent is noise (18 levels every
            # 5 s); runs log their own summary ("run finished level=...").
            for name in _CHATTY_LOGGERS:
                logging.getLogger(name).setLevel(logging.WARNING)

    def beat_init(**_: Any) -> None:
        logger.info("scheduler beat started levels=%d keepalive_s=%s",
                    settings.levels.max_level, settings.keepalive_s)

    def worker_init(**_: Any) -> None:
        telemetry.init_tracing(SERVICE_NAME, settings.common.otel_exporter)
        if settings.metrics_port:
            _serve_metrics(runtime)

    def worker_process_init(**_: Any) -> None:
        telemetry.reset_after_fork()
        telemetry.init_tracing(SERVICE_NAME, settings.common.otel_exporter)

    def worker_ready(**_: Any) -> None:
        logger.info("scheduler worker ready levels=%d queues=%s name=%s",
                    settings.levels.max_level, ",".join(level_queues(settings)),
                    settings.worker_name)
        runtime.ready.set()
        tasks.kick(app, runtime)

    def worker_shutting_down(**_: Any) -> None:
        runtime.ready.clear()
        runtime.stop.set()

    # Signals are process-wide: weak=False keeps the closures alive, dispatch_uid makes a
    # second create_celery() in one process replace, not duplicate, the receivers.
    for signal, receiver in ((signals.setup_logging, setup_logging),
                             (signals.beat_init, beat_init),
                             (signals.worker_init, worker_init),
                             (signals.worker_process_init, worker_process_init),
                             (signals.worker_ready, worker_ready),
                             (signals.worker_shutting_down, worker_shutting_down)):
        signal.disconnect(dispatch_uid=f"clepsydra-scheduler-{receiver.__name__}")
        signal.connect(receiver, weak=False,
                       dispatch_uid=f"clepsydra-scheduler-{receiver.__name__}")


def _serve_metrics(runtime: SchedulerRuntime) -> None:
    from prometheus_client import CollectorRegistry, start_http_server

    from clepsydra_scheduler.delivery import SystemClock
    from clepsydra_scheduler.metrics import SchedulerCollector, gather

    settings = runtime.settings
    clock = SystemClock()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(
        lambda: gather(settings.levels, runtime.level_state, None, clock.now_ms())))
    assert settings.metrics_port is not None
    start_http_server(settings.metrics_port, addr=settings.metrics_bind, registry=registry)
    logger.info("scheduler metrics on bind=%s port=%d", settings.metrics_bind,
                settings.metrics_port)
