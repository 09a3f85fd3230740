"""``python -m clepsydra_analytics serve``: the API under gunicorn (gthread, one worker: a
jobs run is a child process, so threads only wait on it)."""

from __future__ import annotations

from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from clepsydra_analytics.app import create_app
from clepsydra_analytics.settings import AnalyticsSettings


class AnalyticsServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: AnalyticsSettings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        options: dict[str, Any] = {
            "bind": f"{s.bind}:{s.port}", "workers": 1, "threads": 4,
            "worker_class": "gthread", "timeout": 120, "graceful_timeout": 10,
            "keepalive": 30, "accesslog": None, "loglevel": s.common.log_level.lower(),
        }
        if "control_socket_disable" in self.cfg.settings:
            options["control_socket_disable"] = True  # see clepsydra_retry.__main__
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def serve(settings: AnalyticsSettings) -> int:
    AnalyticsServer(settings).run()
    return 0
