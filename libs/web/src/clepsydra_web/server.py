"""The services under gunicorn: one application runner, JSON log lines, JSON error pages.

:class:`GunicornServer` runs a Flask app factory with the options a service gives (bind,
workers, threads, worker class, timeouts, hooks), gunicorn's own log lines as JSON like every
other line of the service, and no shared control socket (several services and tests on one
machine would fight over it).

gunicorn answers what never reaches the app — a request line over its limit (414), headers
over their limits (431), a malformed request line or header (400) — with an HTML page. Every
error a client of ours sees is ``{"error": CODE, "message": text}``, so each
service's worker installs :func:`write_json_error` in place of gunicorn's writer, in the worker
process only.

This module is what gunicorn's master imports (the worker classes live here): it stays free
of Flask and of every service's app, which each worker imports after the fork
(DEC-memory-at-rest).

:meth:`GunicornServer.run_in_process` runs a one-worker service without the master: the
service's own process opens the listeners and runs the worker class itself, as the arbiter's
``spawn_worker`` would in the forked child (the same app, hooks, signals, graceful stop and
logs), one process where there were two (CLEPSYDRA_SINGLE_PROCESS, what ``make run`` sets:
DEC-memory-at-rest). Nothing restarts a worker that dies then: the
process exits and the local stack's supervisor starts it again.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gunicorn import __version__, sock, util
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import AppImportError
from gunicorn.glogging import Logger as GunicornLogger
from gunicorn.workers.gthread import ThreadWorker

from clepsydra_core.runtime import logging as clogging
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
    like every other line of the service (``clepsydra_core.runtime.logging``)."""

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

    def serve(self, *, in_process: bool) -> int:
        """:meth:`run_in_process` when asked (and the service has one worker), else gunicorn's
        master and its workers (``run``); the exit status."""
        if in_process and self.cfg.workers == 1:
            return self.run_in_process()
        self.run()
        return 0

    def run_in_process(self) -> int:
        """The configured worker class run in this process (one worker, no master, no fork):
        the listeners, the worker built and run as the arbiter's ``spawn_worker`` does in its
        child, the hooks (``on_starting``, ``when_ready``, ``pre_fork``, ``post_fork``,
        ``worker_exit``, ``on_exit``; ``server`` is this application), gunicorn's signals
        (SIGTERM: finish the requests in flight within ``graceful_timeout``; SIGINT/SIGQUIT: at
        once). The worker stops when its parent changes, as a forked worker does when its
        master dies. The exit status: 0 after a stop, the arbiter's 4 when the app does not
        load, 3 when the worker fails to boot, 1 when it fails later."""
        cfg = self.cfg
        if cfg.workers != 1:
            raise ValueError(f"one worker runs in process, not {cfg.workers}")
        log = cfg.logger_class(cfg)
        log.info("Starting gunicorn %s, its one worker in this process (no master)",
                 __version__)
        cfg.on_starting(self)
        listeners = sock.create_sockets(cfg, log)
        for listener in listeners:
            log.info("Listening at: %s (%s)", listener, os.getpid())
        cfg.when_ready(self)
        worker = cfg.worker_class(1, os.getppid(), listeners, self, cfg.timeout / 2.0, cfg, log)
        cfg.pre_fork(self, worker)
        worker.pid = os.getpid()
        status = 0
        try:
            log.info("Booting worker with pid: %s", worker.pid)
            cfg.post_fork(self, worker)
            worker.init_process()
        except SystemExit as exc:  # SIGINT/SIGQUIT: gunicorn's handler exits at once
            status = exc.code if isinstance(exc.code, int) else 0
        except AppImportError as exc:
            log.debug("Exception while loading the application", exc_info=True)
            print(f"{exc}", file=sys.stderr)
            status = Arbiter.APP_LOAD_ERROR
        except Exception:
            log.exception("Exception in worker process")
            status = 1 if worker.booted else Arbiter.WORKER_BOOT_ERROR
        finally:
            log.info("Worker exiting (pid: %s)", worker.pid)
            try:
                worker.tmp.close()
                cfg.worker_exit(self, worker)
            except Exception:
                log.exception("Exception during worker exit")
            for listener in listeners:  # the worker closed them when it stopped well
                listener.close()
            cfg.on_exit(self)
        return status
