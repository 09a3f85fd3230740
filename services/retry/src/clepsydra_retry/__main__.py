"""`python -m clepsydra_retry`: the retry service under gunicorn (gthread workers).

The service is stateless (settings and DLQ state in Redis), so CLEPSYDRA_RETRY_WORKERS may be
any number; each worker builds its own app after the fork (tracing initialised per process).
"""

from __future__ import annotations

import sys
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from clepsydra_core import logging as clogging
from clepsydra_core.errors import ConfigError
from clepsydra_retry.app import create_app
from clepsydra_retry.settings import RetrySettings


class RetryServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: RetrySettings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        options: dict[str, Any] = {
            "bind": f"{s.bind}:{s.port}",
            "workers": s.workers,
            "threads": s.threads,
            "worker_class": "clepsydra_web.server.JsonThreadWorker",
            "timeout": 120,
            "graceful_timeout": 10,
            "keepalive": 30,
            "accesslog": None,
            "loglevel": s.common.log_level.lower(),
        }
        if "control_socket_disable" in self.cfg.settings:
            # gunicorn >= 24 opens a control socket at one shared path per user; several
            # services (and tests) on one machine would fight over it.
            options["control_socket_disable"] = True
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def main() -> int:
    try:
        settings = RetrySettings.from_env()
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"clepsydra retry: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure(settings.common.log_level)
    RetryServer(settings).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
