"""A Celery worker started without Celery's command line (DEC-memory-at-rest).

``app.worker_main(["worker", ...])`` goes through ``celery.bin.celery``, which imports every
``celery`` sub-command to build its command group: the ``amqp`` shell's REPL (click_repl and
prompt_toolkit), pygments to colour ``celery call`` output, click and its plug-ins, and every
distribution's entry points: 9.6 MiB RSS a process that runs only a worker never uses. The
``worker`` command itself builds ``app.Worker(...)`` from its options and starts it;
:func:`run_worker` does the same from the options given, converted as the command line
converts them (pool name, log level, ``%h`` in the node name), every other option left to the
app's configuration as the command line leaves it.

:class:`WorkerThread` runs the same worker on a thread of a process whose main thread serves
something else (the analytics API in ``make run``). It is Celery's ``WorkController``
without the command line's ``Worker`` subclass, whose signal handlers, banner and logging set-up
need the main thread; it stops as Celery's own signal handler stops a worker, by the warm
shutdown flag of ``celery.worker.state`` (the loop sees it within a second), and returns after
the task in progress.

Like :mod:`clepsydra_core.runtime.celery_beat`, this module imports Celery only when called
(clepsydra_core does not depend on Celery).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)


def run_worker(app: Any, *, pool: str, concurrency: int, queues: Sequence[str], loglevel: str,
               hostname: str, **options: Any) -> int:
    """``celery worker --quiet -P pool -c concurrency -Q queues -l loglevel -n hostname``
    with ``options`` (``without_gossip=True``, ...), in this process until it shuts down; its
    exit code."""
    worker = app.Worker(quiet=True, **_options(pool, concurrency, queues, loglevel, hostname,
                                                 options))
    worker.start()
    return int(worker.exitcode or 0)


def _options(pool: str, concurrency: int, queues: Sequence[str], loglevel: str, hostname: str,
             options: dict[str, Any]) -> dict[str, Any]:
    """The worker's options as the command line converts them."""
    from celery import concurrency as pools
    from celery.utils.log import mlevel
    from celery.utils.nodenames import default_nodename, host_format

    return {"hostname": host_format(default_nodename(hostname)),
            "pool_cls": pools.get_implementation(pool), "loglevel": mlevel(loglevel),
            "concurrency": concurrency, "queues": list(queues), **options}


class WorkerThread:
    """``WorkerThread(app, pool=..., ...).start()``: the worker of :func:`run_worker` on a
    daemon thread; ``stop()`` at the process's end. ``on_stopped`` is called (on that thread)
    when the worker stops without being asked to: the process should end with it."""

    def __init__(self, app: Any, *, pool: str, concurrency: int, queues: Sequence[str],
                 loglevel: str, hostname: str, on_stopped: Callable[[], None],
                 **options: Any) -> None:
        self._worker = app.WorkController(ready_callback=self._ready, **_options(
            pool, concurrency, queues, loglevel, hostname, options))
        self._on_stopped = on_stopped
        self._stopping = threading.Event()
        self.ready = threading.Event()
        """Set once the worker consumes its queues."""
        self.failed = False
        self._thread = threading.Thread(target=self._run, name="celery-worker", daemon=True)

    def start(self) -> WorkerThread:
        self._thread.start()
        return self

    def _ready(self, _consumer: Any) -> None:
        logger.info("celery worker %s ready (a thread of this process)", self._worker.hostname)
        self.ready.set()

    def _run(self) -> None:
        try:
            self._worker.start()
        except BaseException:  # start() handles its own; anything else ends the worker too
            logger.exception("the Celery worker thread failed")
            self.failed = True
        if self._worker.exitcode:
            self.failed = True
        if not self._stopping.is_set():
            logger.error("the Celery worker stopped unasked (exit code %s)",
                         self._worker.exitcode)
            self.failed = True
            self._on_stopped()

    def stop(self, timeout_s: float) -> bool:
        """Warm shutdown (the task in progress finishes), waiting ``timeout_s`` at most; True
        when the worker has stopped."""
        from celery.worker import state

        self._stopping.set()
        state.should_stop = 0  # what Celery's SIGTERM handler sets: EX_OK, warm
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.error("the Celery worker did not stop in %.0fs", timeout_s)
            return False
        state.should_stop = None  # a worker started later in this process runs
        return True
