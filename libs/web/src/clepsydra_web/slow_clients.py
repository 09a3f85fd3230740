"""A slow client may not hold a thread (bad input loses nothing and the service stays up).

gunicorn's gthread worker hands a connection to a pool thread as soon as its first bytes
arrive, and the thread then reads the request with a blocking socket: a client that sends half a
request head and trickles the rest a byte at a time holds that thread for as long as it likes,
and as many such clients as the pool has threads stop the service for everyone (seen: 20
connections left a store with 8 threads answering nothing, not even ``/healthz``).

:class:`CompleteRequestsOnly`, mixed into a gthread worker before ``ThreadWorker``, lets a
thread take a request only once all of it arrived -- the head up to its blank line and
``Content-Length`` bytes of body. Until then whatever the socket holds is read without waiting
into the connection's own buffer and the connection goes back to the worker's poller
(gunicorn's own "pending" path), costing no thread; the poller wakes it on the next bytes.
Once the request is whole the buffer is handed to gunicorn's parser, which reads it first. A
request still incomplete ``HEAD_DEADLINE_S`` after its first byte is dropped. A request of
more than ``READY_BYTES`` (a large batch) goes to a thread once that much arrived: a client
that sends this fast is not trickling, and the rest is read at its pace.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

from gunicorn.workers import gthread

READY_BYTES = 64 * 1024
"""A request this far along goes to a thread (the most a connection buffers here)."""
HEAD_DEADLINE_S = 10.0
"""How long a request may take to arrive whole once its first byte came."""

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d{1,12})[ \t]*\r\n", re.I)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:[^\r\n]*chunked", re.I)


def request_complete(data: bytes) -> bool:
    """Whether ``data`` (the start of what the client sent) holds one whole request, or enough
    of it that waiting for more is the app's business."""
    if len(data) >= READY_BYTES:
        return True
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    head = data[:head_end + 2]
    if _CHUNKED.search(head):
        return data.find(b"\r\n0\r\n\r\n", head_end) >= 0 or data.endswith(b"0\r\n\r\n")
    match = _CONTENT_LENGTH.search(head)
    length = int(match.group(1)) if match else 0
    return len(data) >= head_end + 4 + length


class CompleteRequestsOnly:
    """Mix into a gthread worker class (before ``ThreadWorker``)."""

    def handle(self, conn: Any) -> Any:
        verdict = self._arrived(conn)
        if verdict is None:
            return False  # past its deadline: close
        if not verdict:
            conn.data_ready = False  # the poller wakes us again on the next bytes
            return gthread._DEFER
        return super().handle(conn)  # type: ignore[misc]

    def _arrived(self, conn: Any) -> bool | None:
        """True: a thread may read the request (what was buffered here is handed to the
        parser); False: not yet; None: it took too long."""
        if getattr(self, "cfg", None) is not None and self.cfg.is_ssl:  # type: ignore[attr-defined]
            return True
        parser = conn.parser
        if parser is not None and parser.unreader.buf.getvalue():
            return True  # read ahead with the previous request: gunicorn serves it
        buffered: bytes = getattr(conn, "guard_buf", b"")
        try:
            chunk: bytes | None = conn.sock.recv(READY_BYTES - len(buffered),
                                                 socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            chunk = None
        except OSError:
            chunk = b""  # let gunicorn meet the error and close
        if chunk:
            buffered += chunk
        if chunk == b"" or request_complete(buffered):
            _hand_over(conn, buffered)
            return True
        conn.guard_buf = buffered
        if not buffered:
            return False  # idle: gunicorn's keep-alive timeout closes it
        since = getattr(conn, "guard_since", None)
        if since is None:
            conn.guard_since = since = time.monotonic()
        return False if time.monotonic() - since < HEAD_DEADLINE_S else None


def _hand_over(conn: Any, buffered: bytes) -> None:
    """Give what was read here to gunicorn's parser, ahead of what the socket still holds."""
    conn.guard_buf = b""
    conn.guard_since = None
    if buffered:
        conn.init()  # makes the parser (a no-op for a kept-alive connection)
        conn.parser.unreader.unread(buffered)
