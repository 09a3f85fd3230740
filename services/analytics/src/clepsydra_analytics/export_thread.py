"""The exporter on a thread of the analytics API's process: ``python -m clepsydra_analytics serve
--export``, what the local stack (``make run``) runs, one process where the exporter, the
schedule and the API were three (DEC-memory-at-rest; Kubernetes keeps the
exporter a Deployment of its own).

The exporter runs as ``export`` does (its lock, its health port, the same loop) until the
process stops: ``stop()`` ends its loop and it writes what it has buffered before the process
exits. An exporter that fails (its lock held by another exporter, an export folder it cannot
use, a crash) stops the whole process, so the stack restarts it whole.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clepsydra_analytics.settings import AnalyticsSettings

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 60.0
"""How long the process's exit waits for the exporter to write its buffers."""


class ExporterThread:
    """``start()`` the exporter beside the API; ``stop()`` it (and wait) at the process's exit.
    ``on_stopped`` is called (on its thread) when it stops without being asked to, as
    :class:`clepsydra_core.runtime.celery_worker.WorkerThread` does."""

    def __init__(self, settings: AnalyticsSettings, on_stopped: Callable[[], None]) -> None:
        self.settings = settings
        self._on_stopped = on_stopped
        self.stopping = threading.Event()
        self.failed = False
        self._thread = threading.Thread(target=self._run, name="exporter", daemon=True)

    def start(self) -> ExporterThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        from clepsydra_analytics.exporter import run_exporter

        try:
            run_exporter(self.settings, self.stopping)
        except Exception:
            logger.exception("the exporter stopped; stopping the process with it")
            self.failed = True
        if not self.stopping.is_set():  # not asked to stop: take the process down with it
            self.failed = True
            self._on_stopped()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            logger.error("the exporter did not stop in %.0fs", JOIN_TIMEOUT_S)
