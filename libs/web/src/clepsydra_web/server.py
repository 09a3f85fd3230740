"""The services under gunicorn: one application runner, JSON log lines, JSON error pages.

:class:`GunicornServer` runs a Flask app factory with the options a service gives (bind,
workers, threads, worker class, timeouts, hooks), gunicorn's own log lines as JSON like every
other line of the service, and no shared control socket (several services and tests on one
machine would fight over it).

gunicorn answers what never reaches the app — a request line over its limit (414), headers
over their limits (431), a malformed request line or header (400) — with an HTML page. Every
error a client of ours sees is ``{"error": CODE, "message": text}`` (issue 18.4), so each
service's worker installs :func:`write_json_error` in place of gunicorn's writer, in the worker
process only.

This module is what gunicorn's master imports (the worker classes live here): it stays free
of Flask and of every service's app, which each worker imports after the fork (issue 14, the
stack's memory at rest).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gunicorn import util
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger
from gunicorn.workers.gthread import ThreadWorker

from clepsydra_core import logging as clogging
from clepsydra_web.slow_clients import CompleteRequestsOnly

if TYPE_CHECKING:
    from flask import Flask


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error`` signature, answering JSON and closing the connection."""
    from clepsydra_web.errors import error_body  # Flask's module: in the worker only

    body = error_body(status_int, mesg or reason)
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


class JsonErrorsMixin:
    """Mix into a gunicorn worker class (before it) so its error pages are JSON."""

    def init_process(self) -> None:
        util.write_error = write_json_error
        super().init_process()  # type: ignore[misc]


class JsonThreadWorker(JsonErrorsMixin, CompleteRequestsOnly, ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker with JSON error pages, whose threads take only requests that
    arrived whole (``worker_class`` of the services; slow_clients.py)."""


JSON_THREAD_WORKER = f"{__name__}.JsonThreadWorker"


class JsonGunicornLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own log lines in the service's format (JSON, or CLEPSYDRA_LOG_FORMAT=text),
    like every other line of the service (``clepsydra_core.logging``)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(clogging.formatter())


class GunicornServer(BaseApplication):  # type: ignore[misc]
    """``GunicornServer(lambda: create_app(settings), {"bind": [...], ...}).run()``."""

    def __init__(self, app_factory: Callable[[], Flask], options: Mapping[str, Any]) -> None:
        self._factory = app_factory
        self._options = {"accesslog": None, "errorlog": "-", "worker_class": JSON_THREAD_WORKER,
                         "logger_class": JsonGunicornLogger, **options}
        super().__init__()

    def load_config(self) -> None:
        options = dict(self._options)
        if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 24
            options["control_socket_disable"] = True
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self._factory()
