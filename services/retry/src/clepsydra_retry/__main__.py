"""`python -m clepsydra_retry`: the retry service under gunicorn (gthread workers).

The service is stateless (settings and DLQ state in Redis), so CLEPSYDRA_RETRY_WORKERS may be
any number; each worker builds its own app after the fork (tracing initialised per process).
The master imports neither Flask nor the app (the stack's memory at rest). With
CLEPSYDRA_SINGLE_PROCESS (``make run``) and one worker, the worker runs in this process,
without a master (clepsydra_web.server.GunicornServer.run_in_process).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import RETRY_SERVICE
from clepsydra_core.runtime import logging as clogging
from clepsydra_retry.settings import RetrySettings
from clepsydra_web.server import GunicornServer

if TYPE_CHECKING:
    from flask import Flask


def _app(settings: RetrySettings) -> Flask:
    """The app, built in each worker after the fork."""
    from clepsydra_retry.app import create_app

    return create_app(settings)


def server(settings: RetrySettings) -> GunicornServer:
    return GunicornServer(lambda: _app(settings), {
        "bind": f"{settings.bind}:{settings.port}",
        "workers": settings.workers,
        "threads": settings.threads,
        "timeout": 120,
        "graceful_timeout": 10,
        "keepalive": 30,
        "loglevel": settings.common.log_level.lower(),
        "proc_name": "clepsydra-retry",
    })


def main() -> int:
    try:
        settings = RetrySettings.from_env()
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"clepsydra retry: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure_from(settings.common, RETRY_SERVICE)
    return server(settings).serve(in_process=settings.common.single_process)


if __name__ == "__main__":
    sys.exit(main())
