"""``python -m clepsydra_analytics serve``: the API under gunicorn (clepsydra_web's runner:
JSON logs and JSON refusals), one worker with threads: a jobs run is a child process, so the
threads only wait on it."""

from __future__ import annotations

from clepsydra_analytics.app import create_app
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_web.server import GunicornServer


def serve(settings: AnalyticsSettings) -> int:
    GunicornServer(lambda: create_app(settings), {
        "bind": f"{settings.bind}:{settings.port}", "workers": 1, "threads": 4,
        "timeout": 120, "graceful_timeout": 10, "keepalive": 30,
        "loglevel": settings.common.log_level.lower(), "proc_name": "clepsydra-analytics",
    }).run()
    return 0
