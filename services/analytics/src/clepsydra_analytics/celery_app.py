"""The local schedule: a small Celery app whose beat sends one ``run_jobs`` task every
CLEPSYDRA_ANALYTICS_SCHEDULE_S (hourly by default); the task runs
``python -m clepsydra_analytics jobs run`` as a child process, so the JVM's memory is returned
after each run. ``python -m clepsydra_analytics schedule`` runs it as one Celery worker process with
beat on a thread of it (one beat for the stack; clepsydra_core.celery_beat: Celery's own ``-B``
would fork a second process); ``schedule --export`` runs the exporter in it too (the local
stack). On Kubernetes a CronJob runs ``jobs run`` instead."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

from celery import Celery, signals

from clepsydra_analytics.export_thread import ExporterThread
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core import logging as clogging
from clepsydra_core import naming
from clepsydra_core.celery_beat import embed_beat
from clepsydra_core.celery_worker import run_worker
from clepsydra_core.telemetry import ANALYTICS_SERVICE

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
        handler of its own (issue 20.7)."""
        settings.common.configure_logging(ANALYTICS_SERVICE)
        clogging.quiet_celery_root_warning()

    signals.setup_logging.disconnect(dispatch_uid="clepsydra-analytics-setup_logging")
    signals.setup_logging.connect(setup_logging, weak=False,
                                  dispatch_uid="clepsydra-analytics-setup_logging")
    return app


def run_schedule(settings: AnalyticsSettings, *, export: bool = False) -> int:
    """One worker with beat on a thread of it, concurrency 1 (runs never overlap); with
    ``export``, the exporter on another thread (export_thread.py). Exit status 1 when the
    exporter failed."""
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    app = create_celery(settings)
    embed_beat(app, state / "beat-schedule")
    clogging.quiet_celery_root_warning()
    exporter: ExporterThread | None = None
    if export:
        exporter = ExporterThread(settings).start()
        signals.worker_shutting_down.connect(exporter.on_worker_shutting_down, weak=False,
                                             dispatch_uid="clepsydra-analytics-exporter")
    try:
        _worker_main(app, settings)
    finally:
        if exporter is not None:
            exporter.stop()
    return 1 if exporter is not None and exporter.failed else 0


def _worker_main(app: Celery, settings: AnalyticsSettings) -> None:
    """The worker, without Celery's command line (clepsydra_core.celery_worker: 9.6 MiB less,
    issue 14)."""
    run_worker(app, pool="solo", concurrency=1, queues=[QUEUE],
               loglevel=settings.common.log_level, hostname=f"analytics@{naming.ANALYTICS_DIR}",
               without_gossip=True, without_mingle=True)
