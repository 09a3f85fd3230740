"""``python -m clepsydra_analytics serve``: the API under gunicorn (clepsydra_web's runner:
JSON logs and JSON refusals), one worker with threads: a jobs run is a child process, so the
threads only wait on it. The master imports neither Flask nor the app: the worker builds it
after the fork (issue 14, the stack's memory at rest). With CLEPSYDRA_SINGLE_PROCESS
(``make run``) the worker runs in this process, without a master."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_web.server import GunicornServer

if TYPE_CHECKING:
    from flask import Flask


def _app(settings: AnalyticsSettings) -> Flask:
    from clepsydra_analytics.app import create_app

    return create_app(settings)


def server(settings: AnalyticsSettings) -> GunicornServer:
    return GunicornServer(lambda: _app(settings), {
        "bind": f"{settings.bind}:{settings.port}", "workers": 1, "threads": 4,
        "timeout": 120, "graceful_timeout": 10, "keepalive": 30,
        "loglevel": settings.common.log_level.lower(), "proc_name": "clepsydra-analytics",
    })


def serve(settings: AnalyticsSettings) -> int:
    return server(settings).serve(in_process=settings.common.single_process)
