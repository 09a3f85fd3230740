"""Celery beat embedded in a worker as a thread of it (DEC-memory-at-rest).

Celery's own ``worker -B`` runs the embedded beat as a second process (a fork of the worker,
``celery.beat._Process``): a whole interpreter's worth of memory more. :func:`embed_beat`
adds a worker step that runs beat's service on a daemon thread of the worker instead
(``celery.beat.EmbeddedService(thread=True)``): started with the worker's other steps, stopped
with them (it writes its schedule file and returns within a second, beat's tick when threaded).
Only one beat may send a schedule's entries, so a worker embeds it only where it is the only
one: the local stack (``make run``) and the analytics schedule; Kubernetes and the images keep
beat a process of its own, workers scale.

The workers that use it import Celery; this module imports it only when called (clepsydra_core
does not depend on Celery).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class EmbeddedBeat:
    """The handle of a beat thread a worker step starts: is it running?"""

    def __init__(self, schedule_path: Path) -> None:
        self.schedule_path = schedule_path
        self.service: Any = None
        """celery.beat's threaded service once the worker created it."""

    def alive(self) -> bool:
        """True while the beat thread runs (False before the worker started it)."""
        return self.service is not None and bool(self.service.is_alive())


def embed_beat(app: Any, schedule_path: Path) -> EmbeddedBeat:
    """Add to ``app``'s worker a step running beat (its ``beat_schedule``) on a thread, with
    its state in ``schedule_path``; the handle tells whether it runs."""
    from celery import bootsteps
    from celery.beat import EmbeddedService

    beat = EmbeddedBeat(schedule_path)

    class ThreadedBeat(bootsteps.StartStopStep):  # type: ignore[misc]
        label = "ThreadedBeat"

        def create(self, worker: Any) -> Any:
            beat.service = EmbeddedService(worker.app, thread=True,
                                           schedule_filename=str(schedule_path))
            logger.info("beat embedded in this worker (a thread) schedule=%s", schedule_path)
            return beat.service

    app.steps["worker"].add(ThreadedBeat)
    return beat
