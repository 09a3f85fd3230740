"""A Celery worker started without Celery's command line (issue 14, the local stack's memory).

``app.worker_main(["worker", ...])`` goes through ``celery.bin.celery``, which imports every
``celery`` sub-command to build its command group: the ``amqp`` shell's REPL (click_repl and
prompt_toolkit), pygments to colour ``celery call`` output, click and its plug-ins, and every
distribution's entry points: 9.6 MiB RSS a process that runs only a worker never uses. The
``worker`` command itself builds ``app.Worker(...)`` from its options and starts it;
:func:`run_worker` does the same from the options given, converted as the command line
converts them (pool name, log level, ``%h`` in the node name), every other option left to the
app's configuration as the command line leaves it.

Like :mod:`clepsydra_core.celery_beat`, this module imports Celery only when called
(clepsydra_core does not depend on Celery).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def run_worker(app: Any, *, pool: str, concurrency: int, queues: Sequence[str], loglevel: str,
               hostname: str, **options: Any) -> int:
    """``celery worker --quiet -P pool -c concurrency -Q queues -l loglevel -n hostname``
    with ``options`` (``without_gossip=True``, ...), in this process until it shuts down; its
    exit code."""
    from celery import concurrency as pools
    from celery.utils.log import mlevel
    from celery.utils.nodenames import default_nodename, host_format

    worker = app.Worker(hostname=host_format(default_nodename(hostname)),
                        pool_cls=pools.get_implementation(pool), loglevel=mlevel(loglevel),
                        concurrency=concurrency, queues=list(queues), quiet=True, **options)
    worker.start()
    return int(worker.exitcode or 0)
