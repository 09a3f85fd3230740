"""A process's small health server: GET routes (``/healthz``, ``/livez``, ``/metrics``)
answered by daemon threads of the standard library's HTTP server, for the parts that serve no
other HTTP (the scheduler's worker and beat, the analytics exporter): no Flask in those
processes (DEC-memory-at-rest).

Every answer that is not a route's is JSON in the v1 error shape: an unknown path 404
``NOT_FOUND``, another method than GET or HEAD 405 ``METHOD_NOT_ALLOWED``, a route that raised
500 ``SYSTEM_ERROR`` (logged). HEAD answers a route's headers without its body.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)

JSON = "application/json"

Response = tuple[int, str, bytes]
"""(status, content type, body)."""

Routes = Mapping[str, Callable[[], Response]]

NOT_FOUND: Response = (404, JSON, b'{"error":"NOT_FOUND","message":"no such path"}')
METHOD_NOT_ALLOWED: Response = (
    405, JSON, b'{"error":"METHOD_NOT_ALLOWED","message":"only GET and HEAD are answered here"}')
SYSTEM_ERROR: Response = (500, JSON, b'{"error":"SYSTEM_ERROR","message":"health check failed"}')


class HealthServer:
    """GET routes on ``bind:port``, served by daemon threads. The constructor raises OSError
    when the port cannot be bound (the caller stops start-up with a message naming the
    setting)."""

    def __init__(self, bind: str, port: int, routes: Routes, *, name: str = "health",
                 server_version: str = "clepsydra") -> None:
        self.name = name
        self._server = ThreadingHTTPServer((bind, port), _handler_class(dict(routes),
                                                                         server_version))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={
            "poll_interval": 0.5}, name=self.name, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _handler_class(routes: Mapping[str, Callable[[], Response]],
                   version: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = version

        def _answer(self, *, body: bool) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, ctype, content = NOT_FOUND
            else:
                try:
                    status, ctype, content = route()
                except Exception:
                    logger.exception("health route failed path=%s", self.path)
                    status, ctype, content = SYSTEM_ERROR
            self._send(status, ctype, content, body=body)

        def _send(self, status: int, ctype: str, content: bytes, *, body: bool = True,
                  allow: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(content)))
            if allow:
                self.send_header("Allow", "GET, HEAD")
            self.end_headers()
            if body:
                self.wfile.write(content)

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _refuse(self) -> None:
            self.close_connection = True  # its body (if any) is not read
            self._send(*METHOD_NOT_ALLOWED, allow=True)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("health request " + format, *args)

    return Handler
