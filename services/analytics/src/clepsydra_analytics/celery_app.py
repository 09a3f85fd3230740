"""The local schedule: a small Celery app whose beat sends one ``run_jobs`` task every
CLEPSYDRA_ANALYTICS_SCHEDULE_S (hourly by default); the task runs
``python -m clepsydra_analytics jobs run`` as a child process, so the JVM's memory is returned
after each run. ``python -m clepsydra_analytics schedule`` runs it as one Celery worker process
with beat on a thread of it (one beat for the stack; clepsydra_core.runtime.celery_beat: Celery's
own ``-B`` would fork a second process). ``serve --schedule`` runs the same worker on a thread of
the API's process instead (the local stack, server.py). On Kubernetes a CronJob runs ``jobs run``
instead."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from celery import Celery, signals

from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core import naming
from clepsydra_core.runtime import logging as clogging
from clepsydra_core.runtime.celery_beat import embed_beat
from clepsydra_core.runtime.celery_worker import WorkerThread, run_worker
from clepsydra_core.runtime.telemetry import ANALYTICS_SERVICE

logger = logging.getLogger(__name__)

QUEUE = "analytics.jobs"
TASK_NAME = "clepsydra_analytics.run_jobs"


def jobs_argv() -> list[str]:
    return [sys.executable, "-m", "clepsydra_analytics", "jobs", "run"]


def create_celery(settings: AnalyticsSettings) -> Celery:
    app = Celery("clepsydra_analytics", broker=settings.common.effective_redis_url,
                 set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        task_default_queue=QUEUE,
        worker_hijack_root_logger=False,
        worker_prefetch_multiplier=1,
        **clogging.CELERY_SERIALIZERS,
        beat_schedule={"analytics-jobs": {
            "task": TASK_NAME, "schedule": settings.schedule_interval_s,
            "options": {"queue": QUEUE, "expires": settings.schedule_interval_s}}},
    )

    @app.task(name=TASK_NAME)  # type: ignore[untyped-decorator]
    def run_jobs() -> int:
        logger.info("scheduled jobs run starting")
        proc = subprocess.run(jobs_argv(), check=False, timeout=settings.job_timeout_s,
                              stdout=subprocess.DEVNULL)
        logger.info("scheduled jobs run finished exit=%d", proc.returncode)
        return proc.returncode

    def setup_logging(**_: Any) -> None:
        """Celery's own lines in the stack's format: with a receiver here Celery adds no
        handler of its own."""
        clogging.configure_from(settings.common, ANALYTICS_SERVICE)
        clogging.quiet_celery_root_warning()

    signals.setup_logging.disconnect(dispatch_uid="clepsydra-analytics-setup_logging")
    signals.setup_logging.connect(setup_logging, weak=False,
                                  dispatch_uid="clepsydra-analytics-setup_logging")
    return app


def run_schedule(settings: AnalyticsSettings) -> int:
    """One worker with beat on a thread of it, concurrency 1 (runs never overlap)."""
    return run_worker(_scheduled_app(settings), **_worker_options(settings))


def schedule_thread(settings: AnalyticsSettings, on_stopped: Callable[[], None]) -> WorkerThread:
    """The same worker (beat on a thread of it) on a thread of another process: ``serve
    --schedule`` (what the local stack runs, server.py). Not started yet."""
    return WorkerThread(_scheduled_app(settings), on_stopped=on_stopped,
                        **_worker_options(settings))


def _scheduled_app(settings: AnalyticsSettings) -> Celery:
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    app = create_celery(settings)
    embed_beat(app, state / "beat-schedule")
    clogging.quiet_celery_root_warning()
    return app


def _worker_options(settings: AnalyticsSettings) -> dict[str, Any]:
    """The worker, without Celery's command line (clepsydra_core.runtime.celery_worker: 9.6 MiB
    less, DEC-memory-at-rest)."""
    return {"pool": "solo", "concurrency": 1, "queues": [QUEUE],
            "loglevel": settings.common.log_level, "hostname": f"analytics@{naming.ANALYTICS_DIR}",
            "without_gossip": True, "without_mingle": True}
