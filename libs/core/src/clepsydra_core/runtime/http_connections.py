"""Keep-alive HTTP/1.1 connections, one per thread, for
:class:`clepsydra_core.runtime.http.HttpClient`'s calls to a plain ``http://`` service without a
proxy (DEC-lean-http-client).

A call through ``requests`` costs its caller 0.4-0.9 ms of CPU (sessions, adapters, urllib3's
pool and retry objects, cookie and hook machinery), more than the store spends answering a
produce, so a producer sending one message per call measured its own client. Here a call is one
write of the request (head and body together: ``http.client`` writes them apart, two wake-ups
of the server per request) and a read of the answer with the framing HTTP/1.1 gives it
(``Content-Length``, chunked, or to the end of the connection); ``http.client``'s own answer
parsing (the ``email`` package) was a fifth of a produce's client CPU.

What ``requests`` did and this keeps: a connection the service closed while it was idle is
noticed before it is used again (it is readable: end of file) and a new one is opened; a call
whose answer could not be read raises (``OSError`` or ``http.client.HTTPException``, mapped to
``Unavailable`` by the caller). One thing more: a call on a kept-alive connection that breaks
before the service could have read the request (the write failed), or before any answer of an
idempotent call (GET, PUT, DELETE) arrived, is sent again once on a new connection: that is the
race of a service closing an idle connection as the call starts. A POST whose answer was lost is
never sent again here (the caller decides: a produce may have been stored).

A short spin for a quick answer, while the machine has a core to spare
(DEC-client-spin-spare-core): with ``spin_us`` > 0 (``CLEPSYDRA_CLIENT_SPIN_US``, 200 by
default), a call whose last answer on this connection came back within ``spin_us`` first reads
without blocking for up to that long, and blocks only after. Going to sleep in ``recv`` and
being woken by the answer can cost a producer as much time as the store's whole answer (a
scheduler's wake-up in a virtual machine): the producer of the peers workload sent 1.6-2.1
times faster with it on a quiet 2-core machine. On a machine whose cores are all taken the
spinning caller takes the core the store and the other services need (it sent up to 1.96 times
slower with it there), so the spin is taken only while the 1-minute load average is under the
usable cores + 1 (:func:`core_to_spare`; the spinner itself counts one). And only while answers
keep coming that fast (a remote service, a held pull or a long poll: no spin) and the caller
calls again as soon as it has one (a loop sending one message after another; one sending at its
own pace sleeps as before), so a caller pays at most ``spin_us`` of CPU a call.

Timeouts are the kernel's (``SO_RCVTIMEO``, ``SO_SNDTIMEO``) on a blocking socket, not
Python's: a socket with a Python timeout polls before every ``send`` and ``recv``, five system
calls a call with the idle check, each releasing the interpreter's lock (8 threads
sending through one client spent more CPU in the kernel than in Python); now three. Either way a
wait without progress longer than the timeout raises ``TimeoutError``. Where the options cannot
be set, Python's timeout is kept.
"""

from __future__ import annotations

import http.client
import mmap
import os
import select
import socket
import struct
import threading
import time
import weakref

from clepsydra_core.wire.cluster import SHARDS_HEADER

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_SHARDS_NAME = SHARDS_HEADER.lower().encode()
_SHARDS_FIELD = b"\r\n" + _SHARDS_NAME + b":"
_CONNECTION = b"\r\nconnection:"
_CONTENT_LENGTH = b"\r\ncontent-length:"
_TRANSFER_ENCODING = b"\r\ntransfer-encoding:"
"""The answer's header lines a call reads, as :func:`_field` finds them."""
MAX_HEAD_BYTES = 64 * 1024
"""An answer whose head is longer is refused (``http.client.LineTooLong``)."""
_RECV_BYTES = 256 * 1024
"""A connection's receive buffer (:meth:`Connection._recv`): anonymous memory of its own, of
which only the pages an answer reached are resident (DEC-memory-cow)."""
DEFAULT_SPIN_US = 200
"""How long a call reads without blocking before it sleeps, while answers come that fast and
the machine has a core to spare (DEC-client-spin-spare-core)."""
LOAD_READ_EVERY_S = 1.0
""":func:`core_to_spare` reads the load average at most this often."""
_USABLE_CORES = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1)
_load_read_at = -LOAD_READ_EVERY_S
"""When :func:`core_to_spare` last read the load average (``perf_counter``'s clock)."""
_spin_pays = True
"""What it found then."""


def spinning_pays(load_1m: float, cores: int) -> bool:
    """Whether a caller may spin for its answer: the machine's 1-minute load average is under
    its usable cores + 1, the spinning caller itself counted (DEC-client-spin-spare-core)."""
    return load_1m < cores + 1


def core_to_spare(now: float) -> bool:
    """:func:`spinning_pays` for this machine now, the load average read at most once a
    second (``now``: ``time.perf_counter()``); True where it cannot be read."""
    global _load_read_at, _spin_pays
    if now - _load_read_at >= LOAD_READ_EVERY_S:
        try:
            _spin_pays = spinning_pays(os.getloadavg()[0], _USABLE_CORES)
        except OSError:
            _spin_pays = True
        _load_read_at = now
    return _spin_pays


GATHER_BYTES = 64 * 1024
"""A body this large is written with its head by one ``sendmsg`` of both, not copied behind
the head first (a batch of 500 messages: 600 KiB copied once more per request)."""


class Connection:
    """One HTTP/1.1 keep-alive connection: a request is one write, its answer read with
    ``Content-Length`` or chunked framing (or up to the end of the connection)."""

    def __init__(self, host: str, port: int, spin_us: int = 0) -> None:
        self.host = host
        self.port = port
        self.spin_s = spin_us / 1e6
        self.spun = 0
        """Answers read while spinning (module docstring)."""
        self._fast = False
        """Spin for this call's answer: the last answer came within the spin, and this call
        came within the spin after it (a caller sending in a loop, not at its own pace)."""
        self._sent_at = 0.0
        self._done_at = 0.0
        bracketed = f"[{host}]" if ":" in host else host
        self.host_header = bracketed if port == 80 else f"{bracketed}:{port}"
        self.sock: socket.socket | None = None
        self.read_timeout_s: float | None = None
        self._buf = b""
        self._view: memoryview | None = None
        self._poll: select.poll | None = None
        """The socket's poll object for :meth:`idle_ok` (None: not made yet)."""
        self.shards = 0
        """The store cluster's size its last answer named (``SHARDS_HEADER``; 0: none)."""

    def connect(self, timeout_s: float) -> None:
        self.sock = socket.create_connection((self.host, self.port), timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.set_timeout(timeout_s)
        self._buf = b""
        self._poll = None

    def set_timeout(self, timeout_s: float) -> None:
        """Bound each wait of a ``send`` or ``recv`` to ``timeout_s``: in the kernel when it
        can (the socket blocks, no poll before each call), else with Python's timeout."""
        sock = self._socket()
        try:
            value = _timeval(timeout_s)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        except (OSError, OverflowError, struct.error):
            sock.settimeout(timeout_s)
        else:
            sock.settimeout(None)
        self.read_timeout_s = timeout_s

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._buf = b""
        self._poll = None
        if sock is not None:
            sock.close()

    def __del__(self) -> None:
        # a client dropped without close(), or the connection of a thread that ended
        self.close()

    def send(self, method: str, target: str, body: bytes | None,
             headers: dict[str, str]) -> None:
        head = f"{method} {target} HTTP/1.1\r\nHost: {self.host_header}\r\n"
        for name, value in headers.items():
            if "\n" in value or "\r" in value:
                raise ValueError(f"header {name} holds a line break")
            head += f"{name}: {value}\r\n"
        if body is not None or method in ("POST", "PUT"):
            head += f"Content-Length: {len(body) if body else 0}\r\n"
        data = (head + "\r\n").encode("latin-1")
        sock = self._socket()
        if self.spin_s:  # (no clock read a call without the spin)
            self._sent_at = now = time.perf_counter()
            self._fast = self._fast and now - self._done_at <= self.spin_s and \
                core_to_spare(now)
        try:
            if body and len(body) >= GATHER_BYTES:
                _send_gathered(sock, data, body)
            else:
                sock.sendall(data + body if body else data)
        except BlockingIOError:  # SO_SNDTIMEO passed without progress
            raise TimeoutError("timed out sending the request") from None

    def idle_ok(self) -> bool:
        """Whether the kept-alive connection can carry the next call: nothing arrived since
        the last answer (an idle connection is readable only when the service closed it)."""
        sock = self.sock
        if sock is None or self._buf:
            return False
        try:
            # one poll object a socket, its descriptor registered once: select.select builds
            # its sets on every call, twice the time (DEC-sdk-send-path)
            poll = self._poll
            if poll is None:
                poll = self._poll = select.poll()
                poll.register(sock, select.POLLIN)
            return not poll.poll(0)  # readable (end of file), hung up, an error: not ok
        except (OSError, ValueError):
            return False

    def receive(self, method: str = "GET") -> tuple[int, bytes]:
        """(status, body) of the answer; the connection is closed after it when the service
        said so or when the body ran to the end of the connection. Of the answer's head only
        what is used is read (DEC-sdk-send-path): the status, ``Content-Length``, and the
        lines that may not be there: ``Transfer-Encoding`` only when the head holds
        "chunked", ``Connection`` when it holds "close" (or the answer is HTTP/1.0), the
        cluster's size when the head names it (:func:`_field` reads a line)."""
        while True:
            status, http10, fields = self._head()
            if not 100 <= status < 200:
                break
        if _SHARDS_NAME in fields:
            shards = _field(fields, _SHARDS_FIELD)
            if shards is not None and shards.isdigit():
                self.shards = int(shards)
        close = False
        if http10 or b"close" in fields:
            tokens = (_field(fields, _CONNECTION) or b"").replace(b" ", b"").split(b",")
            close = b"close" in tokens or (http10 and b"keep-alive" not in tokens)
        if status in (204, 304) or method == "HEAD":
            body = b""
        elif b"chunked" in fields and b"chunked" in (_field(fields, _TRANSFER_ENCODING)
                                                       or b""):
            body = self._chunked()
        else:
            length = _field(fields, _CONTENT_LENGTH)
            if length is not None:
                if not length.isdigit():
                    raise http.client.HTTPException(f"bad Content-Length {length.decode()!r}")
                body = self._exactly(int(length))
            else:
                body = self._to_end()
                close = True
        if close:
            self.close()
        if self.spin_s:
            self._done_at = time.perf_counter()
            self._fast = self._done_at - self._sent_at <= self.spin_s
        return status, body

    def _head(self) -> tuple[int, bool, bytes]:
        """(status, whether it is HTTP/1.0, the header lines lowercased: from the status
        line's line end to the last header's, a CR LF at either end) of the next answer."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("answer head")
            chunk = self._recv()
            if not chunk:
                if buf:
                    raise http.client.IncompleteRead(buf)
                raise http.client.RemoteDisconnected("closed without an answer")
            buf = self._buf = buf + chunk
            end = buf.find(b"\r\n\r\n", max(0, len(buf) - len(chunk) - 3))
        line_end = buf.find(b"\r\n")
        line = buf[:line_end]
        fields = buf[line_end:end + 2].lower()
        self._buf = buf[end + 4:]
        # "HTTP/1.x NNN reason": the version, a space, three digits, then a space or nothing
        status = line[9:12]
        if line[:7] != b"HTTP/1." or not status.isdigit() or line[12:13].strip() \
                or line[8:9] != b" ":
            raise http.client.BadStatusLine(line.decode("latin-1"))
        return int(status), line[7:8] == b"0", fields

    def _socket(self) -> socket.socket:
        sock = self.sock
        if sock is None:  # closed by close() from another thread (the client's close)
            raise ConnectionAbortedError("the connection was closed")
        return sock

    def _recv(self) -> bytes:
        """What arrived, read into the connection's own buffer (a ``recv`` of 256 KiB
        allocates that much for every answer: a ``mmap`` and ``munmap`` each time). The
        buffer is mapped, not a ``bytearray`` (which writes zeros over all of it): a
        connection that only ever gets small answers holds a page or two of it, not 256 KiB
        (a scheduler's ~20 kept-alive connections held 5 MiB so; DEC-memory-cow)."""
        view = self._view
        if view is None:
            view = self._view = receive_buffer()
        if self._fast:
            sock = self._socket()
            end = self._sent_at + self.spin_s
            while True:
                try:
                    size = sock.recv_into(view, 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter() < end:
                        continue
                    break
                self.spun += 1
                return view[:size].tobytes()
        try:
            size = self._socket().recv_into(view)
        except BlockingIOError:  # SO_RCVTIMEO passed without an answer
            raise TimeoutError("timed out waiting for the answer") from None
        return view[:size].tobytes()

    def _exactly(self, size: int) -> bytes:
        buf = self._buf
        if len(buf) == size:  # the common case: the answer's body came with its head
            self._buf = b""
            return buf
        while len(self._buf) < size:
            chunk = self._recv()
            if not chunk:
                raise http.client.IncompleteRead(self._buf, size - len(self._buf))
            self._buf += chunk
        data, self._buf = self._buf[:size], self._buf[size:]
        return data

    def _line(self) -> bytes:
        end = self._buf.find(b"\r\n")
        while end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("chunk size")
            chunk = self._recv()
            if not chunk:
                raise http.client.IncompleteRead(self._buf)
            self._buf += chunk
            end = self._buf.find(b"\r\n")
        line, self._buf = self._buf[:end], self._buf[end + 2:]
        return line

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {size_text!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)

    def _to_end(self) -> bytes:
        parts = [self._buf]
        self._buf = b""
        while chunk := self._recv():
            parts.append(chunk)
        return b"".join(parts)


class RequestNotSent(Exception):
    """The request could not be written: the service cannot have acted on it."""


class NotSent(ConnectionError):
    """The call's connection could not be made, or broke before its request was written: the
    service never received it (``clepsydra_core.errors.NotSent`` for the caller)."""


class ConnectionPool:
    """One keep-alive connection per calling thread to ``host:port``. Thread-safe."""

    def __init__(self, host: str, port: int, spin_us: int = DEFAULT_SPIN_US) -> None:
        self.host = host
        self.port = port
        self.spin_us = spin_us
        self._local = threading.local()
        self._all: weakref.WeakSet[Connection] = weakref.WeakSet()
        """Every live thread's connection (one of a thread that ended closes itself)."""
        self._lock = threading.Lock()
        self.shards = 0
        """The store cluster's size the last answer that named it named (``SHARDS_HEADER``)."""

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = Connection(self.host, self.port, self.spin_us)
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        return conn

    def exchange(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
                 read_timeout_s: float, connect_timeout_s: float) -> tuple[int, bytes]:
        """(status, body) of one call; raises ``OSError`` or ``http.client.HTTPException``."""
        conn = self._connection()
        reused = conn.sock is not None
        if reused and not conn.idle_ok():
            conn.close()
            reused = False
        while True:
            try:  # (the call made here, not in a method of its own: DEC-sdk-send-path)
                if conn.sock is None:
                    try:
                        conn.connect(connect_timeout_s)
                    except OSError as exc:
                        conn.close()
                        raise NotSent(f"could not connect: {exc}") from exc
                if conn.read_timeout_s != read_timeout_s:
                    conn.set_timeout(read_timeout_s)
                try:
                    conn.send(method, target, body, headers)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise RequestNotSent() from exc
                answer = conn.receive(method)
                if conn.shards:
                    self.shards = conn.shards
                return answer
            except RequestNotSent as exc:
                conn.close()
                if not reused:
                    raise NotSent(str(exc.__cause__ or "request not sent")) from exc.__cause__
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if not (reused and method in IDEMPOTENT
                        and isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError,
                                             ConnectionResetError))):
                    raise
            reused = False

    def close(self) -> None:
        """Close every thread's connection (a later call opens a new one)."""
        with self._lock:
            conns = list(self._all)
        for conn in conns:
            conn.close()


def _field(fields: bytes, name: bytes) -> bytes | None:
    """The value of the header line ``name`` (``b"\\r\\nname:"``, lowercased) in an answer's
    lowercased header lines (:meth:`Connection._head`), without the white space around it; the
    first such line's; None without one. Found with one search where the name is followed by
    its colon (every server here writes it so); a line with white space before the colon
    (obsolete, RFC 9112 5.1) is found by reading the lines one by one."""
    at = fields.find(name)
    if at >= 0:
        at += len(name)
        return fields[at:fields.find(b"\r\n", at)].strip()
    wanted = name[2:-1]
    for line in fields.split(b"\r\n"):
        key, colon, value = line.partition(b":")
        if colon and key.strip() == wanted:
            return value.strip()
    return None


def receive_buffer(size: int = _RECV_BYTES) -> memoryview:
    """``size`` bytes of anonymous memory, resident only where written (an anonymous
    ``mmap``: the kernel's zero pages until a ``recv_into`` reaches them)."""
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE))


def _send_gathered(sock: socket.socket, head: bytes, body: bytes) -> None:
    """``sendall(head + body)`` without making ``head + body``: one ``sendmsg`` of both, then
    whatever it did not take."""
    sent = sock.sendmsg([head, body])
    if sent < len(head):
        sock.sendall(memoryview(head)[sent:])
        sent = len(head)
    if sent - len(head) < len(body):
        sock.sendall(memoryview(body)[sent - len(head):])


def _timeval(seconds: float) -> bytes:
    """A ``struct timeval`` for ``SO_RCVTIMEO``/``SO_SNDTIMEO`` (0 would mean no timeout: at
    least a microsecond)."""
    whole = int(seconds)
    micros = max(1, round((seconds - whole) * 1_000_000)) if whole == 0 else \
        round((seconds - whole) * 1_000_000)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return struct.pack("@ll", whole, micros)
