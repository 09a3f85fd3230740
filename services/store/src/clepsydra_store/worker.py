"""The store's gunicorn worker: gthread, answering produce on its poller thread and keeping a
busy keep-alive connection on its thread.

Plain gthread hands a keep-alive connection back to the main thread after every response: the
main thread re-registers the socket with its poller, wakes when the next request arrives and
submits it to the thread pool again. For small requests that round trip (a pipe write, two
poller updates, a futures hand-off and several GIL hand-overs) costs more CPU than the request
itself (docs/performance.md, "Single produce"). This worker lets the thread that answered a request
wait a little for the same client's next one and serve it directly; it gives the connection
back to the poller when the client stays quiet for ``LINGER_S`` or when other connections are
waiting for a thread, so they wait at most one linger. Like every service's worker, a thread
takes only a request that arrived whole (clepsydra_web/slow_clients.py).

Produce requests, single and batch, skip the thread pool altogether once their connection is
kept alive (DEC-poller-produce): when such a connection becomes readable, the poller thread
reads what arrived without blocking (a batch's body whole, however many reads it takes),
answers the produce requests in it itself (``inline.py``; the same envelope as every other way in,
``api/envelope.py``) and writes the answers in one ``send``; the connection stays registered
with the poller. The single sends of the connections readable in one pass are appended as one
batch, then each connection is answered (DEC-poller-group-append). A pull that cannot wait
(no ``waitMs``, or entries past its offset) is answered there too; one that may hold goes to a
thread (DEC-poller-pull). Whatever else arrives (another route, a request gunicorn must judge)
goes to a thread as before once it arrived whole, after
the answers before it were written. Off with
``CLEPSYDRA_STORE_INLINE_PRODUCE=false``, with the fast path off, and with sync flush (an
acknowledgement that waits for an fsync must not hold the poller).
"""

from __future__ import annotations

import gc
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from clepsydra_store import inline
from clepsydra_web.server import JsonErrorsMixin
from clepsydra_web.slow_clients import HEAD_DEADLINE_S, READY_BYTES, CompleteRequestsOnly

if TYPE_CHECKING:
    from clepsydra_store.api.context import StoreContext
    from clepsydra_store.api.fastpath import LeanPath

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


@dataclass(frozen=True, slots=True)
class InlineProduce:
    """What the poller thread needs to answer the poller lane's requests itself (produce, the
    pull that cannot wait)."""

    lean: LeanPath
    limit: int
    answered: Any
    """The ``clepsydra_store_poller_answered_requests`` counter."""
    spin_s: float
    """``StoreSettings.poller_spin_us``, in seconds."""
    spun: Any
    """The ``clepsydra_store_poller_spin_caught_requests`` counter."""

    @classmethod
    def of(cls, app: Any) -> InlineProduce | None:
        """For the store's Flask app, when its settings allow answering on the poller."""
        # imported here, in the worker after the fork: gunicorn's master loads this module
        # (the worker class) and needs neither Flask nor the engine (DEC-memory-at-rest)
        from clepsydra_store.api.context import EXTENSION
        from clepsydra_store.api.fastpath import LeanPath

        lean = getattr(app, "wsgi_app", None)
        extensions = getattr(app, "extensions", {})
        context: StoreContext | None = extensions.get(EXTENSION)
        if not isinstance(lean, LeanPath) or context is None:
            return None
        settings = context.settings
        if not settings.inline_produce or settings.engine.flush != "async":
            return None
        return cls(lean, settings.max_request_bytes, context.obs.poller_answered,
                   settings.poller_spin_us / 1e6, context.obs.poller_spun)

    def takes(self, method: str, path: str) -> bool:
        """Whether a request of this method and path (its query aside) is of the poller's
        lane: its connection then goes back to the poller after a thread answered it."""
        return self.lean.lines.match(f"{method} {path} HTTP/1.1\r\n".encode("latin-1"),
                                     0) is not None

    def serve(self, buf: bytes, remote: tuple[str, int]) -> inline.Served:
        served = inline.serve(buf, self.lean.answer_poller, self.limit, remote,
                              cached_http_date(), self.lean.lines)
        if served.count:
            self.answered.inc(served.count)
        return served

    def serve_group(self, bufs: list[tuple[bytes, tuple[str, int]]],
                    deliver: Callable[[int, inline.Served], None]) -> None:
        """:meth:`serve` of the buffers of several connections readable in one pass, their
        single sends appended as one (DEC-poller-group-append); each one's answers to
        ``deliver`` as soon as they are made."""
        lean = self.lean
        counted = self.answered

        def count_then_deliver(i: int, served: inline.Served) -> None:
            if served.count:
                counted.inc(served.count)
            deliver(i, served)

        inline.serve_group(bufs, lean.answer_poller, lean.groups, lean.answer_poller_group,
                           self.limit, cached_http_date(), count_then_deliver, lean.lines)


def freeze_startup_objects() -> None:
    """Leave what the worker built at start (modules, the app, the opened store) out of the
    garbage collector's full passes (``gc.freeze``): they live as long as the process, and a
    500-message batch keeps enough objects alive for a while to set off full passes that walked
    them all again (DEC-worker-gc-freeze)."""
    gc.collect()
    gc.freeze()


NOTIFY_EVERY_S = 1.0
"""The worker tells the arbiter it is alive at most this often (gunicorn: every loop turn, a
file-system call per request once the poller answers produce)."""


class StoreThreadWorker(JsonErrorsMixin, CompleteRequestsOnly, ThreadWorker):  # type: ignore[misc]
    on_poller: InlineProduce | None = None
    _keepalive_s = 0.0
    _notified = 0.0

    def notify(self) -> None:
        now = time.monotonic()
        if now - self._notified >= NOTIFY_EVERY_S:
            self._notified = now
            super().notify()

    def init_process(self) -> None:
        util.http_date = cached_http_date  # this worker process only
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        if not self.cfg.is_ssl:
            self.on_poller = InlineProduce.of(self.wsgi)
        self._keepalive_s = float(self.cfg.keepalive)
        freeze_startup_objects()

    _answered_at = 0.0
    _spin = False

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """Right after answering a produce, look for the next request without sleeping, for
        up to ``poller_spin_us`` (DEC-poller-spin): a producer sending one message at a time waited
        for this thread's sleep and wake-up between its calls as long as for the answer. Only
        while requests come that fast: once one came later than the spin after the answer
        before it (producers sending at their own pace), the poller sleeps as before, and spins
        again after a request that came within it. The lock of the interpreter is free during
        each look (a system call)."""
        on_poller = self.on_poller
        if on_poller is not None and self._spin:
            end = self._answered_at + on_poller.spin_s
            select_ = self.poller.select
            while time.perf_counter() < end:
                try:
                    events = select_(0)
                except InterruptedError:
                    break
                if events:
                    on_poller.spun.inc()
                    if len(events) == 1:
                        key = events[0][0]
                        key.data(key.fileobj)
                    else:
                        self._dispatch(events)
                    return
        if on_poller is None:
            super().wait_for_and_dispatch_events(timeout)
            return
        try:
            events = self.poller.select(timeout)
        except InterruptedError:
            return
        if len(events) == 1:
            key = events[0][0]
            key.data(key.fileobj)
        elif events:
            self._dispatch(events)

    def _dispatch(self, events: list[tuple[Any, int]]) -> None:
        """Run the callbacks of several events; the kept-alive connections the poller answers
        that are readable in this pass together (:meth:`_on_readable_group`: their single sends
        appended as one, DEC-poller-group-append), after the other callbacks."""
        readable = self.on_client_socket_readable
        conns = []
        for key, _ in events:
            callback = key.data
            if getattr(callback, "func", None) == readable:  # partial(readable, conn)
                conns.append(callback.args[0])
            else:
                callback(key.fileobj)
        if len(conns) < 2:
            for conn in conns:
                readable(conn, conn.sock)
            return
        self._on_readable_group(conns)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM, the graceful stop: held pulls and the timers' waiting hand-over answer now
        (DEC-pull-hold), not at the end of their wait (the worker waits for its threads' requests
        before it exits). In another
        thread: this signal handler runs on the poller thread, which may be inside the
        engine's ``Arrivals`` (waking pulls after an append) right now."""
        super().handle_exit(sig, frame)
        from clepsydra_store.api.context import EXTENSION

        context: StoreContext | None = getattr(self.wsgi, "extensions", {}).get(EXTENSION)
        if context is not None:
            threading.Thread(target=context.store.release_waits, name="release-held-pulls",
                             daemon=True).start()

    def handle_request(self, req: Any, conn: Any) -> Any:
        # the connection of a request of the poller's lane (a produce, a pull: one that held, or
        # the first on its connection) goes back to the poller, which answers the next ones
        # (batches too: it reads a body whole however large, inline.py)
        on_poller = self.on_poller
        conn.to_poller = on_poller is not None and on_poller.takes(req.method, req.path)
        return super().handle_request(req, conn)

    def handle(self, conn: Any) -> Any:
        result = super().handle(conn)
        while (result is True and self.alive and not getattr(conn, "to_poller", False)
               and self._next_request_ready(conn)):
            result = super().handle(conn)
        return result

    # ---- produce answered on the poller thread (inline.py) -------------------------------

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        if self.on_poller is None or not self.alive:
            super().on_client_socket_readable(conn, client)
            return
        buf = self._receive(conn)
        if buf is not None:
            self._serve_one(self.on_poller, conn, buf, time.perf_counter())

    def _serve_one(self, on_poller: InlineProduce, conn: Any, buf: bytes,
                   arrived: float) -> None:
        """What one connection sent, answered on the poller thread."""
        try:
            served = on_poller.serve(buf, conn.client)
        except Exception:  # the answer catches everything it knows; never stop the poller
            self.log.exception("answering produce on the poller failed")
            self._drop(conn)
            return
        self._answered(conn, served, arrived)

    def _on_readable_group(self, conns: list[Any]) -> None:
        """:meth:`on_client_socket_readable` of several connections readable in one pass: what
        each sent read first, then answered together (``InlineProduce.serve_group``)."""
        if self.on_poller is None or not self.alive:
            for conn in conns:
                super().on_client_socket_readable(conn, conn.sock)
            return
        ready: list[tuple[Any, bytes]] = []
        for conn in conns:
            buf = self._receive(conn)
            if buf is not None:
                ready.append((conn, buf))
        if not ready:
            return
        arrived = time.perf_counter()
        if len(ready) == 1:
            self._serve_one(self.on_poller, *ready[0], arrived)
            return
        delivered: set[int] = set()

        def deliver(i: int, served: inline.Served) -> None:
            delivered.add(i)
            self._answered(ready[i][0], served, arrived)

        try:
            self.on_poller.serve_group([(buf, conn.client) for conn, buf in ready], deliver)
        except Exception:  # the answer catches everything it knows; never stop the poller
            self.log.exception("answering produce on the poller failed")
            for i, (conn, _) in enumerate(ready):
                if i not in delivered:
                    self._drop(conn)

    def _receive(self, conn: Any) -> bytes | None:
        """What the connection sent, with what it sent before (a request not whole then); None
        when there is nothing to answer yet (a batch still arriving) or the connection was
        dropped."""
        buffered: bytes = getattr(conn, "guard_buf", b"")
        need: int = getattr(conn, "guard_need", 0)
        pieces: list[bytes] | None = getattr(conn, "guard_pieces", None)
        have = len(buffered) + (conn.guard_have if pieces else 0)
        try:
            chunk: bytes = conn.sock.recv(max(READY_BYTES, need) - have)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return None
        if need and have + len(chunk) < need:
            # a batch still arriving: keep its pieces and join them once, when it is whole (a
            # concatenation per read would copy a slow large body over and over)
            since = getattr(conn, "guard_since", None)
            if since is not None and time.monotonic() - since > HEAD_DEADLINE_S:
                self._drop(conn)
                return None
            if pieces is None:
                pieces = conn.guard_pieces = []
                conn.guard_have = 0
            pieces.append(chunk)
            conn.guard_have += len(chunk)
            self._kept_alive(conn)
            return None
        if pieces:
            buffered = b"".join([buffered, *pieces])
            conn.guard_pieces = None
        return buffered + chunk if buffered else chunk

    def _answered(self, conn: Any, served: inline.Served, arrived: float) -> None:
        """Write the answers of what ``conn`` sent, keep what follows them."""
        self.nr += served.count
        if served.count:  # spin after this answer if this request came within the spin
            assert self.on_poller is not None
            self._spin = arrived - self._answered_at <= self.on_poller.spin_s
            self._answered_at = time.perf_counter()
        sent = 0
        if served.out:
            try:
                sent = conn.sock.send(served.out)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(conn)
                return
        if sent < len(served.out) or served.verdict == inline.Verdict.HANDOVER:
            self._to_thread(conn, served.out[sent:], served)
            return
        if served.rest:  # the start of the next request: it must arrive whole in time
            now = time.monotonic()
            since = now if served.count else (getattr(conn, "guard_since", None) or now)
            if now - since > HEAD_DEADLINE_S:
                self._drop(conn)
                return
            conn.guard_since = since
        else:
            conn.guard_since = None
        conn.guard_buf = served.rest
        conn.guard_need = served.need
        self._kept_alive(conn)

    def _kept_alive(self, conn: Any) -> None:
        self.keepalived_conns.remove(conn)  # kept alive from now: last in expiry order
        conn.timeout = time.monotonic() + self._keepalive_s  # conn.set_timeout(), cheaper
        self.keepalived_conns.append(conn)

    def _to_thread(self, conn: Any, unsent: bytes, served: inline.Served) -> None:
        """A thread writes what the socket did not take and serves the request gunicorn must
        answer (if any); then the connection comes back to the poller (``finish_request``)."""
        self.poller.unregister(conn.sock)
        self.keepalived_conns.remove(conn)
        conn.guard_need, conn.guard_pieces = 0, None
        if served.verdict == inline.Verdict.HANDOVER:
            conn.guard_buf, conn.guard_since = b"", None
            conn.parser.unreader.unread(served.rest)
        else:
            conn.guard_buf = served.rest
        future = self.tpool.submit(self._write_then_handle, conn, unsent)
        future.add_done_callback(
            lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _write_then_handle(self, conn: Any, unsent: bytes) -> Any:
        if unsent:
            try:
                conn.sock.setblocking(True)
                conn.sock.sendall(unsent)
            except OSError:
                return False
        if conn.parser.unreader.buf.getvalue():
            return self.handle(conn)
        return True

    def _drop(self, conn: Any) -> None:
        """Close a kept-alive connection (the client closed it, or it failed)."""
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass
        self.keepalived_conns.remove(conn)
        self.nr_conns -= 1
        conn.close()

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
