"""The store's gunicorn worker: gthread, keeping a busy keep-alive connection on its thread.

Plain gthread hands a keep-alive connection back to the main thread after every response: the
main thread re-registers the socket with its poller, wakes when the next request arrives and
submits it to the thread pool again. For small requests that round trip (a pipe write, two
poller updates, a futures hand-off and several GIL hand-overs) costs more CPU than the request
itself (README, "Where the time goes"). This worker lets the thread that answered a request
wait a little for the same client's next one and serve it directly; it gives the connection
back to the poller when the client stays quiet for ``LINGER_S`` or when other connections are
waiting for a thread, so they wait at most one linger. Like every service's worker, a thread
takes only a request that arrived whole (clepsydra_web/slow_clients.py).
"""

from __future__ import annotations

import select
import time
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from clepsydra_web.server import JsonErrorsMixin
from clepsydra_web.slow_clients import CompleteRequestsOnly

LINGER_S = 0.005
"""How long a thread waits for the next request on its connection before handing it back."""


_format_http_date = util.http_date
_date_cache: tuple[int, str] = (0, "")


def cached_http_date(timestamp: float | None = None) -> str:
    """gunicorn's ``Date`` header, formatted once per second instead of per response
    (``email.utils.formatdate`` was ~5 % of a small request's CPU)."""
    global _date_cache
    if timestamp is not None:
        return str(_format_http_date(timestamp))
    now = int(time.time())
    cached = _date_cache
    if cached[0] != now:
        cached = (now, str(_format_http_date(now)))
        _date_cache = cached
    return cached[1]


class StoreThreadWorker(JsonErrorsMixin, CompleteRequestsOnly, ThreadWorker):  # type: ignore[misc]
    def init_process(self) -> None:
        util.http_date = cached_http_date  # this worker process only
        super().init_process()

    def handle(self, conn: Any) -> Any:
        result = super().handle(conn)
        while result is True and self.alive and self._next_request_ready(conn):
            result = super().handle(conn)
        return result

    def _next_request_ready(self, conn: Any) -> bool:
        """True when the client sends its next request within the linger and no other
        connection is waiting for a thread."""
        if conn.parser.unreader.buf.getvalue():
            return True
        if self._others_waiting():
            return False
        try:
            readable, _, _ = select.select([conn.sock], [], [], LINGER_S)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def _others_waiting(self) -> bool:
        queue = getattr(self.tpool, "_work_queue", None)
        return bool(queue is not None and queue.qsize())
