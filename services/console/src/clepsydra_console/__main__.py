"""`python -m clepsydra_console`: the console under gunicorn (gthread workers), as the other
HTTP services run (clepsydra_web.server): JSON log lines, the worker in this process without a
master under CLEPSYDRA_SINGLE_PROCESS (``make run``), the app built after the fork."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from clepsydra_console.settings import ConsoleSettings
from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import CONSOLE_SERVICE
from clepsydra_core.runtime import logging as clogging
from clepsydra_web.server import GunicornServer

if TYPE_CHECKING:
    from flask import Flask


def _app(settings: ConsoleSettings) -> Flask:
    from clepsydra_console.app import create_app

    return create_app(settings)


def server(settings: ConsoleSettings) -> GunicornServer:
    return GunicornServer(lambda: _app(settings), {
        "bind": f"{settings.bind}:{settings.port}",
        "workers": 1,
        "threads": settings.threads,
        "timeout": 120,
        "graceful_timeout": 10,
        "keepalive": 30,
        "loglevel": settings.common.log_level.lower(),
        "proc_name": "clepsydra-console",
    })


def main() -> int:
    try:
        settings = ConsoleSettings.from_env()
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"clepsydra console: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure_from(settings.common, CONSOLE_SERVICE)
    return server(settings).serve(in_process=settings.common.single_process)


if __name__ == "__main__":
    sys.exit(main())
