"""gunicorn's own refusals in the v1 JSON error shape.

gunicorn answers what never reaches the app itself — a request line over its limit (414),
headers over their limits (431), a malformed request line or header (400) — with an HTML page.
Every error a client of ours sees is ``{"error": CODE, "message": text}`` (issue 18.4), so each
service's worker installs :func:`write_json_error` in place of gunicorn's writer, in the worker
process only (like the store's cached ``Date`` header).
"""

from __future__ import annotations

import socket

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from clepsydra_web.errors import error_body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error`` signature, answering JSON and closing the connection."""
    body = error_body(status_int, mesg or reason)
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


class JsonErrorsMixin:
    """Mix into a gunicorn worker class (before it) so its error pages are JSON."""

    def init_process(self) -> None:
        util.write_error = write_json_error
        super().init_process()  # type: ignore[misc]


class JsonThreadWorker(JsonErrorsMixin, ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker with JSON error pages (``worker_class`` of the services)."""
