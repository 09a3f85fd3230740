"""``python -m clepsydra_store``: the store service under gunicorn.

Exactly one worker process (the single writer of the store's files) with ``threads`` gthread
threads, bound to ``bind:port``. The MessageStore is opened inside the worker, after the fork
(its flush and retention threads would not survive one), and closed when the worker exits:
SIGTERM or SIGINT stop gracefully (in-flight requests finish, then checkpoints are written).
A bad setting stops start-up with a message naming the variable (exit status 2).
With CLEPSYDRA_SINGLE_PROCESS (``make run``) the worker runs in this process, without
gunicorn's master (clepsydra_web.server.GunicornServer.run_in_process): the same app, hooks
and stop; the MessageStore is opened and closed in the same places.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import STORE_SERVICE
from clepsydra_core.runtime import logging as clogging
from clepsydra_store.settings import StoreSettings
from clepsydra_web.server import GunicornServer

if TYPE_CHECKING:
    from flask import Flask

logger = logging.getLogger("clepsydra_store")

WORKER_TIMEOUT_S = 300
"""Recovery of a large store happens while the worker boots; give it time."""
GRACEFUL_TIMEOUT_S = 30


def _worker_exit(server: Any, worker: Any) -> None:
    """Close the MessageStore in the worker (flush, checkpoints). The arbiter may call this
    for a worker it never loaded an app in: then there is nothing to close."""
    app = getattr(worker, "wsgi", None)
    if app is None or not hasattr(app, "extensions"):
        return  # no app loaded (and Flask not imported: the master never imports it)
    from clepsydra_store.api.context import EXTENSION, StoreContext

    context: StoreContext = app.extensions[EXTENSION]
    logger.info("closing the message store pid=%s", worker.pid)
    context.close()
    logger.info("message store closed pid=%s", worker.pid)


def _app(settings: StoreSettings) -> Flask:
    """The app, built in the worker after the fork: the master never imports Flask nor the
    engine (DEC-memory-at-rest)."""
    from clepsydra_store.app import create_app

    return create_app(settings)


def server(settings: StoreSettings) -> GunicornServer:
    """One worker process (the single writer) with the store's own gthread worker."""
    return GunicornServer(lambda: _app(settings), {
        "bind": [f"{settings.bind}:{settings.port}"],
        "workers": 1,
        "worker_class": "clepsydra_store.worker.StoreThreadWorker",
        "threads": settings.threads,
        "keepalive": settings.keepalive_s,
        "timeout": WORKER_TIMEOUT_S,
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        "loglevel": settings.common.log_level.lower(),
        "proc_name": "clepsydra-store",
        "preload_app": False,
        "worker_exit": _worker_exit,
    })


def main() -> int:
    try:
        settings = StoreSettings.from_env()
    except ConfigError as exc:
        print(f"clepsydra-store: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure_from(settings.common, STORE_SERVICE)
    logger.info("starting store bind=%s port=%d threads=%d flush=%s data_dir=%s",
                settings.bind, settings.port, settings.threads, settings.engine.flush,
                settings.engine.data_dir)
    return server(settings).serve(in_process=settings.common.single_process)


if __name__ == "__main__":
    sys.exit(main())
