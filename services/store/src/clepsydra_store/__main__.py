"""``python -m clepsydra_store``: the store service under gunicorn.

Exactly one worker process (the single writer of the store's files) with ``threads`` gthread
threads, bound to ``bind:port``. The MessageStore is opened inside the worker, after the fork
(its flush and retention threads would not survive one), and closed when the worker exits:
SIGTERM or SIGINT stop gracefully (in-flight requests finish, then checkpoints are written).
A bad setting stops start-up with a message naming the variable (exit status 2).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger

from clepsydra_core.errors import ConfigError
from clepsydra_core.logging import JsonFormatter, configure
from clepsydra_store.api.context import EXTENSION, StoreContext
from clepsydra_store.app import create_app
from clepsydra_store.settings import StoreSettings

logger = logging.getLogger("clepsydra_store")

WORKER_TIMEOUT_S = 300
"""Recovery of a large store happens while the worker boots; give it time."""
GRACEFUL_TIMEOUT_S = 30


class JsonGunicornLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own log lines as JSON, like every other line of the service."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())


def _worker_exit(server: Any, worker: Any) -> None:
    """Close the MessageStore in the worker (flush, checkpoints). The arbiter may call this
    for a worker it never loaded an app in: then there is nothing to close."""
    app = getattr(worker, "wsgi", None)
    if not isinstance(app, Flask):
        return
    context: StoreContext = app.extensions[EXTENSION]
    logger.info("closing the message store pid=%s", worker.pid)
    context.close()
    logger.info("message store closed pid=%s", worker.pid)


class StoreApplication(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        options: dict[str, Any] = {
            "bind": [f"{s.bind}:{s.port}"],
            "workers": 1,
            "worker_class": "clepsydra_store.worker.StoreThreadWorker",
            "threads": s.threads,
            "keepalive": s.keepalive_s,
            "timeout": WORKER_TIMEOUT_S,
            "graceful_timeout": GRACEFUL_TIMEOUT_S,
            "accesslog": None,
            "errorlog": "-",
            "loglevel": s.common.log_level.lower(),
            "logger_class": JsonGunicornLogger,
            "proc_name": "clepsydra-store",
            "preload_app": False,
            "worker_exit": _worker_exit,
        }
        if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 24: no shared socket
            options["control_socket_disable"] = True
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def main() -> int:
    try:
        settings = StoreSettings.from_env()
    except ConfigError as exc:
        print(f"clepsydra-store: {exc.message}", file=sys.stderr)
        return 2
    configure(settings.common.log_level)
    logger.info("starting store bind=%s port=%d threads=%d flush=%s data_dir=%s",
                settings.bind, settings.port, settings.threads, settings.engine.flush,
                settings.engine.data_dir)
    StoreApplication(settings).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
