"""HttpClient's lean keep-alive connections (http_connections.py), against a real
HTTP/1.1 server on loopback whose answers each test scripts: the framings an answer may have,
one write per request, a connection per thread, a connection the service closed while idle,
the one safe resend, and errors mapped to ``Unavailable``."""

from __future__ import annotations

import gc
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import orjson
import pytest

from clepsydra_core.errors import NotSent, TopicNotFound, Unavailable
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.runtime.http_connections import (
    GATHER_BYTES,
    Connection,
    _send_gathered,
    _timeval,
)

Handler = Callable[["Exchange"], bool]
"""Answers one request; False closes the connection after it."""


class Exchange:
    """One request the server read: its head and body, and the socket to answer on."""

    def __init__(self, sock: socket.socket, head: str, body: bytes, packets: int) -> None:
        self.sock = sock
        self.head = head
        self.body = body
        self.packets = packets
        self.method, self.target = head.split(" ", 2)[:2]

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None

    def json(self, status: int, body: bytes, *extra: str) -> bool:
        fields = "".join(f"{e}\r\n" for e in extra)
        self.sock.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{fields}"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        return True


class Server:
    """A threaded HTTP/1.1 server on a free loopback port."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.ended = threading.Semaphore(0)
        """Released once per connection the client closed."""
        self.requests: list[Exchange] = []
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.open.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        buf = b""
        with sock:
            while True:
                packets = 0
                while b"\r\n\r\n" not in buf:
                    chunk = sock.recv(65536)
                    if not chunk:
                        self.ended.release()
                        return
                    buf += chunk
                    packets += 1
                head, _, buf = buf.partition(b"\r\n\r\n")
                text = head.decode("latin-1")
                length = 0
                for line in text.split("\r\n")[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":")[1])
                while len(buf) < length:
                    buf += sock.recv(65536)
                exchange = Exchange(sock, text, buf[:length], packets)
                buf = buf[length:]
                self.requests.append(exchange)
                if not self.handler(exchange):
                    return

    def close(self) -> None:
        self.listener.close()
        for sock in self.open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    servers: list[Server] = []

    def start(handler: Handler) -> Server:
        servers.append(Server(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_call_is_one_write_with_the_token_and_trace_context(
        serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: ex.json(201, b'{"ok": true}'))
    http = HttpClient(server.url + "/", token="clp_t", service="store")
    assert http.post("/v1/topics/{}/messages".format("a%20b"), {"body": "x"}) == {"ok": True}
    assert http.get("/v1/x", params={"max": 3, "body": False, "none": None}) == {"ok": True}
    http.close()
    post, get = server.requests
    assert post.packets == 1 and post.body == b'{"body":"x"}'
    assert post.header("Authorization") == "Bearer clp_t"
    assert post.header("Content-Type") == "application/json"
    assert post.target == "/v1/topics/a%20b/messages"
    assert get.target == "/v1/x?max=3&body=false"
    assert server.connections == 1  # kept alive


def test_chunked_and_read_to_the_end_answers(serve: Callable[[Handler], Server]) -> None:
    def handler(ex: Exchange) -> bool:
        if ex.target == "/chunked":
            ex.sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"4;ext=1\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\nX-T: 1\r\n\r\n")
            return True
        ex.sock.sendall(b"HTTP/1.0 200 OK\r\n\r\n{\"b\": 2}")
        return False

    server = serve(handler)
    http = HttpClient(server.url)
    assert http.get("/chunked") == {"a": 1}
    assert http.get("/chunked") == {"a": 1}
    assert http.get("/to-end") == {"b": 2}
    assert http.get("/chunked") == {"a": 1}  # a new connection after the one that ended
    assert server.connections == 2
    http.close()


def test_error_answers_map_to_the_error_tree(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: ex.json(404, b'{"error": "TOPIC_NOT_EXIST", "message": "no"}'))
    http = HttpClient(server.url)
    with pytest.raises(TopicNotFound, match="no"):
        http.get("/v1/topics/x")
    http.close()


def test_each_thread_has_its_own_connection(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: ex.json(200, b"{}"))
    http = HttpClient(server.url)
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for _ in range(50):
                assert http.get("/x") == {}
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=calls) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    http.close()
    assert not errors
    assert server.connections == 4 and len(server.requests) == 200


def test_the_connection_of_a_thread_that_ended_is_closed(
        serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: ex.json(200, b"{}"))
    http = HttpClient(server.url)
    thread = threading.Thread(target=http.get, args=("/x",))
    thread.start()
    thread.join()
    del thread
    gc.collect()
    assert server.ended.acquire(timeout=5)  # not left open until the client is closed
    assert http.get("/y") == {}  # this thread's own connection
    http.close()
    assert server.ended.acquire(timeout=5)


def test_a_connection_the_service_closed_while_idle_is_replaced(
        serve: Callable[[Handler], Server]) -> None:
    # the service answers, then closes the kept-alive connection (its keep-alive timeout)
    closed = threading.Event()

    def handler(ex: Exchange) -> bool:
        ex.json(201, b"{}")
        ex.sock.shutdown(socket.SHUT_RDWR)
        closed.set()
        return False

    server = serve(handler)
    http = HttpClient(server.url)
    for _ in range(3):
        closed.clear()
        assert http.post("/v1/p", {}) == {}
        assert closed.wait(5)
    http.close()
    assert len(server.requests) == 3 and server.connections == 3  # no POST sent twice


def test_a_lost_answer_is_resent_only_when_idempotent(
        serve: Callable[[Handler], Server]) -> None:
    # a request after the first on a connection is read and the connection reset unanswered
    def handler(ex: Exchange) -> bool:
        if ex.target.endswith("/warm"):
            return ex.json(200, b"{}")
        if sum(1 for r in server.requests if r.sock is ex.sock) > 1:
            ex.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00"
                               b"\x00\x00")  # RST
            return False
        return ex.json(200, b'{"n": 1}')

    server = serve(handler)
    http = HttpClient(server.url, service="store")
    http.get("/warm")
    assert http.get("/x") == {"n": 1}  # resent once on a new connection
    assert [r.target for r in server.requests] == ["/warm", "/x", "/x"]
    http.close()
    http.get("/warm")  # a new connection
    with pytest.raises(Unavailable, match="the store at"):
        http.post("/p", {})  # may have been acted on: not resent
    assert [r.target for r in server.requests][-1:] == ["/p"]
    assert sum(1 for r in server.requests if r.target == "/p") == 1
    http.close()


def test_a_service_that_does_not_answer_in_time_raises_unavailable(
        serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: True)  # reads, never answers
    http = HttpClient(server.url, timeout_s=0.2, service="store")
    with pytest.raises(Unavailable, match="TimeoutError"):
        http.post("/p", {})
    http.close()


def test_timeouts_are_the_kernels_on_a_blocking_socket(
        serve: Callable[[Handler], Server]) -> None:
    """No poll before each send and receive (a Python socket timeout's), the
    kernel's SO_RCVTIMEO/SO_SNDTIMEO instead, set again when a call asks for another timeout;
    a call's own timeout still raises Unavailable (TimeoutError) when no answer comes."""
    server = serve(lambda ex: ex.json(200, b"{}") if ex.target == "/fast" else True)
    http = HttpClient(server.url, timeout_s=10, service="store")
    assert http.get("/fast") == {}
    assert http._pool is not None
    conn = http._pool._connection()
    assert conn.sock is not None and conn.sock.gettimeout() is None
    assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16) == _timeval(10)
    assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16) == _timeval(10)
    with pytest.raises(Unavailable, match="TimeoutError"):
        http.request("GET", "/never", timeout_s=0.2)  # reads, never answers
    assert http.get("/fast") == {}  # a new connection, the client's own timeout again
    conn = http._pool._connection()
    assert conn.sock is not None
    assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16) == _timeval(10)
    http.close()


def test_a_large_body_is_written_with_its_head_uncopied(
        serve: Callable[[Handler], Server]) -> None:
    """A body of GATHER_BYTES or more goes out with its head in one ``sendmsg`` (a
    batch is not copied behind its head first); the service reads the same request."""
    server = serve(lambda ex: ex.json(201, b'{"ok": true}'))
    http = HttpClient(server.url)
    payload = {"messages": [{"body": "x" * 1000, "n": i} for i in range(300)]}
    assert http.post("/v1/topics/t/messages/batch", payload) == {"ok": True}
    http.close()
    (ex,) = server.requests
    assert len(ex.body) >= GATHER_BYTES and orjson.loads(ex.body) == payload
    assert ex.header("content-length") == str(len(ex.body))


def test_what_one_sendmsg_did_not_take_is_sent_after_it() -> None:
    """A small send buffer makes ``sendmsg`` take part of the head and body: the rest follows,
    in order, nothing twice."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    head, body = b"H" * 3000 + b"\r\n", bytes(range(256)) * 4096
    got: list[bytes] = []

    def read() -> None:
        while chunk := right.recv(65536):
            got.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    _send_gathered(left, head, body)
    left.close()
    reader.join(10)
    right.close()
    assert b"".join(got) == head + body


def test_a_timeval_is_never_zero() -> None:
    """0 would mean no timeout at all."""
    assert _timeval(0.2) == struct.pack("@ll", 0, 200_000)
    assert _timeval(0) == struct.pack("@ll", 0, 1)
    assert _timeval(2.5) == struct.pack("@ll", 2, 500_000)
    assert _timeval(0.9999999) == struct.pack("@ll", 1, 0)


def test_https_and_proxies_keep_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    assert HttpClient("http://store.example:8081")._pool is not None
    assert HttpClient("https://store.example")._pool is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert HttpClient("http://store.example:8081")._pool is None
    assert HttpClient("http://store.example:8081", env_proxies=False)._pool is not None


def _spun(http: HttpClient) -> int:
    pool = http._pool
    assert pool is not None
    conn: Connection = pool._local.conn  # this thread's connection
    return conn.spun


def test_a_caller_in_a_loop_spins_for_quick_answers_and_no_one_else_does(
        serve: Callable[[Handler], Server], monkeypatch: pytest.MonkeyPatch) -> None:
    """DEC-client-spin-spare-core: a call reads without blocking, for up to spin_us, only while
    the last answer came within it and the call came within it after that answer (a loop
    sending message after message); a caller at its own pace, or a slow service, sleeps in recv
    as before."""
    import time

    from clepsydra_core.runtime import http_connections

    monkeypatch.setattr(http_connections, "_spin_pays", True)  # whatever this machine's load
    monkeypatch.setattr(http_connections, "_load_read_at", float("inf"))
    quick = serve(lambda ex: ex.json(200, b"{}"))
    loop = HttpClient(quick.url, spin_us=200_000)  # answers come far within 200 ms
    for _ in range(20):
        loop.get("/x")
    assert _spun(loop) >= 10  # the first call cannot spin; later ones found answers spinning
    off = HttpClient(quick.url, spin_us=0)
    for _ in range(20):
        off.get("/x")
    assert _spun(off) == 0
    paced = HttpClient(quick.url, spin_us=2_000)
    for _ in range(5):
        paced.get("/x")
        time.sleep(0.02)  # 20 ms between calls, the spin is 2 ms
    assert _spun(paced) == 0

    def slowly(ex: Exchange) -> bool:
        time.sleep(0.02)
        return ex.json(200, b"{}")

    slow = HttpClient(serve(slowly).url, spin_us=2_000)  # 20 ms answers, 2 ms spin
    for _ in range(5):
        slow.get("/x")
    assert _spun(slow) == 0
    for http in (loop, off, paced, slow):
        http.close()


def test_a_caller_spins_only_while_the_machine_has_a_core_to_spare(
        serve: Callable[[Handler], Server], monkeypatch: pytest.MonkeyPatch) -> None:
    """DEC-client-spin-spare-core: the spin is taken while the 1-minute load average is under
    the usable cores + 1 (the spinner counted), read at most once a second. The load average
    is replaced here: a test cannot set the machine's."""
    from clepsydra_core.runtime import http_connections as hc

    assert hc.spinning_pays(0.0, 2) and hc.spinning_pays(2.9, 2)
    assert not hc.spinning_pays(3.0, 2) and not hc.spinning_pays(9.5, 2)
    assert hc.spinning_pays(16.5, 16)
    load = [50.0]
    reads: list[float] = []

    def loadavg() -> tuple[float, float, float]:
        reads.append(load[0])
        return load[0], load[0], load[0]

    monkeypatch.setattr(hc.os, "getloadavg", loadavg)
    monkeypatch.setattr(hc, "_load_read_at", -hc.LOAD_READ_EVERY_S)
    quick = serve(lambda ex: ex.json(200, b"{}"))
    busy = HttpClient(quick.url, spin_us=200_000)
    for _ in range(20):
        busy.get("/x")
    assert _spun(busy) == 0  # every core taken: it sleeps in recv
    assert reads == [50.0]  # read once in that second, not once a call
    load[0] = 0.5
    monkeypatch.setattr(hc, "_load_read_at", -hc.LOAD_READ_EVERY_S)  # a second later
    for _ in range(20):
        busy.get("/x")
    assert _spun(busy) >= 10  # a core to spare: it spins again
    busy.close()


def test_the_spin_is_a_client_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from clepsydra_core.errors import ConfigError
    from clepsydra_core.runtime.http_connections import DEFAULT_SPIN_US

    def spin() -> int:
        pool = HttpClient("http://127.0.0.1:1")._pool
        assert pool is not None
        return pool.spin_us

    monkeypatch.delenv("CLEPSYDRA_CLIENT_SPIN_US", raising=False)
    assert spin() == DEFAULT_SPIN_US
    monkeypatch.setenv("CLEPSYDRA_CLIENT_SPIN_US", "0")
    assert spin() == 0
    monkeypatch.setenv("CLEPSYDRA_CLIENT_SPIN_US", "-1")
    with pytest.raises(ConfigError, match="CLEPSYDRA_CLIENT_SPIN_US"):
        spin()


def test_a_refused_connection_is_a_request_never_sent() -> None:
    """DEC-shard-send-retry: a producer may send elsewhere what a store never received (the
    connection refused), never what it may have read (the answer lost after the write)."""
    with socket.socket() as bound:  # bound, never listening: the port is held and refuses
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        http = HttpClient(f"http://127.0.0.1:{port}", service="store")
        with pytest.raises(NotSent, match="ConnectionRefusedError"):
            http.post("/p", {})
        http.close()


def test_lost_answers_are_not_requests_never_sent(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: True)  # reads, never answers
    http = HttpClient(server.url, timeout_s=0.2, service="store")
    with pytest.raises(Unavailable) as info:
        http.post("/p", {})
    assert not isinstance(info.value, NotSent)
    http.close()


def test_the_cluster_size_an_answer_names_is_kept(serve: Callable[[Handler], Server]) -> None:
    """DEC-store-shards: a store of a cluster names its size on every answer; a client learns
    it from the calls it makes anyway (a one-store store names none: 0)."""
    sizes = iter(["", "X-Clepsydra-Shards: 3", ""])

    def handler(ex: Exchange) -> bool:
        size = next(sizes)
        return ex.json(200, b"{}", *([size] if size else []))

    server = serve(handler)
    http = HttpClient(server.url, service="store")
    http.get("/a")
    assert http.shards_hint == 0
    http.get("/b")
    assert http.shards_hint == 3
    http.get("/c")
    assert http.shards_hint == 3  # kept until another answer names another size
    http.close()


def _resident_pages(view: memoryview) -> int:
    """Pages of ``view``'s memory that are resident (``/proc/self/pagemap``'s present bit,
    readable without root)."""
    import ctypes

    page = 4096
    start = ctypes.addressof(ctypes.c_char.from_buffer(view)) // page * page
    end = start + len(view)
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(start // page * 8)
        raw = pagemap.read((end - start + page - 1) // page * 8)
    return sum(1 for (entry,) in struct.iter_unpack("<Q", raw) if entry >> 63)


def test_a_connection_holds_only_the_receive_buffer_its_answers_reached(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-memory-cow: a kept-alive connection's 256 KiB receive buffer is resident only where
    answers reached (a scheduler keeps ~20 connections open for small answers); a large
    answer still reads whole through it."""
    large = b'"' + b"x" * (200 * 1024) + b'"'
    server = serve(lambda ex: ex.json(200, large if ex.target == "/large" else b"{}"))
    conn = Connection("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    conn.connect(5.0)
    conn.send("GET", "/small", None, {})
    assert conn.receive() == (200, b"{}")
    view = conn._view
    assert view is not None and len(view) == 256 * 1024
    assert _resident_pages(view) <= 2
    conn.send("GET", "/large", None, {})
    assert conn.receive() == (200, large)
    assert conn._view is view  # the same buffer, allocated once
    conn.close()


ODD_HEADS = [
    # (the answer's head lines after the status line, whether the connection stays open)
    ([b"content-length: {n}"], True),  # lower case
    ([b"CONTENT-LENGTH: {n}", b"CONNECTION: KEEP-ALIVE"], True),  # upper case
    ([b"Server: x", b"X-Content-Length: 999", b"Content-Lengthy: 998", b"Date: Sat",
      b"Content-Type: application/json; charset=utf-8", b"Content-Length:{n}",
      b"X-Trace: close chunked"], True),  # extra headers, some alike, no space after ':'
    ([b"Content-Length :  {n} "], True),  # white space before the colon (obsolete) and after
    ([b"Content-Length: {n}", b"Connection: close"], False),
    ([b"Content-Length: {n}", b"Connection: Close"], False),
    ([b"Connection: keep-alive, close", b"Content-Length: {n}"], False),  # a token list
    ([b"Content-Length: {n}", b"X-Clepsydra-Shards: 2"], True),
]


@pytest.mark.parametrize(("fields", "kept"), ODD_HEADS)
def test_an_answer_head_is_read_whatever_its_legal_shape(
        serve: Callable[[Handler], Server], fields: list[bytes], kept: bool) -> None:
    """DEC-sdk-send-path: the answer's head is read only for what the client uses (status,
    Content-Length, Connection, the cluster's size), in any case, among any other headers;
    the body is framed by its length (the next answer on the same connection reads right),
    and the client closes the connection when the service says so (the server here keeps it
    open: only the client's reading of the head closes it)."""
    body = b'{"ok": 1}'
    head = b"".join(f + b"\r\n" for f in fields).replace(b"{n}", str(len(body)).encode())

    def handler(ex: Exchange) -> bool:
        ex.sock.sendall(b"HTTP/1.1 201 Created\r\n" + head + b"\r\n" + body)
        return True

    server = serve(handler)
    http = HttpClient(server.url, service="store")
    try:
        assert http.post("/a", {}) == {"ok": 1}
        assert http.post("/b", {}) == {"ok": 1}
        assert server.connections == (1 if kept else 2)
        assert http.shards_hint == (2 if b"X-Clepsydra-Shards: 2" in fields else 0)
    finally:
        http.close()


def test_answers_without_a_reason_in_http_1_0_and_with_an_error(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-sdk-send-path: a status line without its reason phrase, an HTTP/1.0 answer kept
    alive, and a 4xx answer whose JSON names the error (SPEC's error tree: the store's 404 is
    ``TopicNotFound``) on one kept connection; a status line that is not HTTP/1.x is refused."""
    error = b'{"error": "TOPIC_NOT_EXIST", "message": "no topic x"}'
    answers = iter([
        b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(error)).encode() + b"\r\n\r\n" + error,
        b"SPDY/3 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    ])

    def handler(ex: Exchange) -> bool:
        ex.sock.sendall(next(answers))
        return True

    server = serve(handler)
    http = HttpClient(server.url)
    try:
        assert http.get("/a") == {}
        assert http.get("/b") == {}
        with pytest.raises(TopicNotFound, match="no topic x"):
            http.get("/c")
        assert server.connections == 1
        with pytest.raises(Unavailable, match="BadStatusLine"):
            http.get("/d")
    finally:
        http.close()


def test_a_header_with_a_line_break_is_refused_before_anything_is_written(
        serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda ex: ex.json(200, b"{}"))
    http = HttpClient(server.url)
    try:
        with pytest.raises(ValueError, match="line break"):
            http.get("/a", headers={"X-A": "1\r\nX-B: 2"})
        assert http.get("/b") == {}
        assert [ex.target for ex in server.requests] == ["/b"]
    finally:
        http.close()


def test_the_idle_check_follows_the_connection_it_is_made_for(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-sdk-send-path: the idle check's poll object is made for each new socket: after the
    client closed a connection (``Connection: close``) the next one is kept alive across
    calls, and when the service closes that one while it is idle, the next POST (never sent
    twice) notices it and goes on a new connection: none lost, none reopened for nothing."""
    closed = threading.Event()

    def handler(ex: Exchange) -> bool:
        if ex.target == "/a":  # the client is told to close
            return ex.json(200, b'{"n": 1}', "Connection: close")
        if ex.target == "/e":  # the service closes after answering
            ex.json(200, b'{"n": 5}')
            ex.sock.shutdown(socket.SHUT_RDWR)
            closed.set()
            return False
        return ex.json(200, b'{"n": 2}')

    server = serve(handler)
    http = HttpClient(server.url)
    try:
        assert http.post("/a", {}) == {"n": 1}
        assert [http.post(f"/{i}", {}) for i in "bcd"] == [{"n": 2}] * 3
        assert server.connections == 2
        assert http.post("/e", {}) == {"n": 5}
        assert closed.wait(5)
        assert http.post("/f", {}) == {"n": 2}
        assert [ex.target for ex in server.requests] == [f"/{i}" for i in "abcdef"]
        assert server.connections == 3
    finally:
        http.close()
