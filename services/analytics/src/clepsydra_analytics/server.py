"""``python -m clepsydra_analytics serve``: the API under gunicorn (clepsydra_web's runner:
JSON logs and JSON refusals), one worker with threads: a jobs run is a child process, so the
threads only wait on it. The master imports neither Flask nor the app: the worker builds it
after the fork (DEC-memory-at-rest). With CLEPSYDRA_SINGLE_PROCESS
(``make run``) the worker runs in this process, without a master.

``serve --schedule --export`` is the analytics of the local stack in one process
(DEC-memory-at-rest: it was two, 94 MiB RSS at rest): beside the API, the schedule's Celery
worker (beat on a thread of it, celery_app.py) and the exporter (export_thread.py) run on
threads of the API's worker process, started once it has booted (its signals are gunicorn's)
and stopped when it exits: the schedule first (the job run in progress finishes), then the
exporter (it writes what it has buffered). Either failing stops the process (exit status 1),
and the stack restarts it.
Kubernetes keeps the three apart: the API and the exporter Deployments, the jobs a CronJob.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, Any

from clepsydra_analytics.export_thread import ExporterThread
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core.errors import ConfigError
from clepsydra_web.server import GunicornServer

if TYPE_CHECKING:
    from flask import Flask

    from clepsydra_core.runtime.celery_worker import WorkerThread

logger = logging.getLogger(__name__)

SCHEDULE_STOP_S = 10.0
"""How long the exit waits for the schedule's worker (a job run in progress) before it goes on
to the exporter; the stack's grace is 30 s."""


def _app(settings: AnalyticsSettings) -> Flask:
    from clepsydra_analytics.app import create_app

    return create_app(settings)


class Companions:
    """The schedule and the exporter on threads of the API's worker process: ``start`` is
    gunicorn's ``post_worker_init`` hook, ``stop`` its ``worker_exit``."""

    def __init__(self, settings: AnalyticsSettings, *, schedule: bool, export: bool) -> None:
        self.settings = settings
        self.schedule = schedule
        self.export = export
        self.worker: WorkerThread | None = None
        self.exporter: ExporterThread | None = None

    @property
    def failed(self) -> bool:
        return any(part is not None and part.failed for part in (self.worker, self.exporter))

    def start(self, _worker: Any = None) -> None:
        if self.export:
            self.exporter = ExporterThread(self.settings, _stop_this_process).start()
        if self.schedule:
            from clepsydra_analytics.celery_app import schedule_thread

            self.worker = schedule_thread(self.settings, _stop_this_process).start()

    def stop(self, _server: Any = None, _worker: Any = None) -> None:
        if self.worker is not None:
            self.worker.stop(SCHEDULE_STOP_S)
        if self.exporter is not None:
            self.exporter.stop()


def _stop_this_process() -> None:
    """A companion stopped unasked: the whole process stops (gunicorn's graceful SIGTERM), and
    the stack starts it again."""
    os.kill(os.getpid(), signal.SIGTERM)


def server(settings: AnalyticsSettings, companions: Companions | None = None) -> GunicornServer:
    hooks = {} if companions is None else {"post_worker_init": companions.start,
                                           "worker_exit": companions.stop}
    return GunicornServer(lambda: _app(settings), {
        "bind": f"{settings.bind}:{settings.port}", "workers": 1, "threads": 4,
        "timeout": 120, "graceful_timeout": 10, "keepalive": 30,
        "loglevel": settings.common.log_level.lower(), "proc_name": "clepsydra-analytics",
        **hooks,
    })


def serve(settings: AnalyticsSettings, *, schedule: bool = False, export: bool = False) -> int:
    if export and settings.exporter_port == settings.port:
        raise ConfigError("CLEPSYDRA_ANALYTICS_EXPORTER_PORT must differ from "
                          "CLEPSYDRA_ANALYTICS_PORT when the exporter runs in the API's process "
                          f"(both {settings.port})")
    companions = Companions(settings, schedule=schedule, export=export) \
        if schedule or export else None
    status = server(settings, companions).serve(in_process=settings.common.single_process)
    if companions is not None and companions.failed:
        logger.error("the analytics process stops: its schedule or exporter failed")
        return status or 1
    return status
