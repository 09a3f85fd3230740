"""The cheapest Python producer, and a client process of its own for the multi-process runs.

``RawConnection`` is a keep-alive HTTP/1.1 socket sending one pre-built request over and over,
so a figure is the server's, not the client's. This module imports only the standard library:
``python -m bench.raw_client`` starts in a tenth of a second, where a bench module (redis,
pytest, the fixtures) takes two seconds of a core, which 4 processes starting together would
take from the server they measure.

A client process (``bench.stack_produce``'s ``procs1``/``procs4``) talks over its pipes:

    python -m bench.raw_client URL PATH BODY_FILE SECONDS
      -> connects, sends once, prints "ready"
      <- a line with the wall-clock time to start at (the same for every process)
      -> sends for SECONDS, prints "messages seconds user_s system_s"

so the parent starts the clock once every process is connected, whatever the machine's speed.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable


class RawConnection:
    """A keep-alive HTTP/1.1 connection sending one pre-built request over and over: the
    cheapest Python client, to show what the server does when the client is not the limit."""

    def __init__(self, url: str, path: str, payload: bytes) -> None:
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.sock = socket.create_connection((self.host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = self.request_bytes(self.host, path, payload)
        self.buf = b""

    @staticmethod
    def request_bytes(host: str, path: str, payload: bytes,
                      headers: dict[str, str] | None = None) -> bytes:
        """A POST of ``payload`` as JSON, with ``headers`` besides the usual ones."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"{extra}Content-Length: {len(payload)}\r\n\r\n").encode() + payload

    def send(self, request: bytes | None = None) -> None:
        """Send the pre-built request (or ``request``) and read its 201 answer."""
        self.sock.sendall(request or self.request)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 201"):
            raise RuntimeError(head.decode(errors="replace"))
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self._recv()
        self.buf = rest[length:]

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("connection closed")
        return data

    def close(self) -> None:
        self.sock.close()


def timed_loop(seconds: float, step: Callable[[], int]) -> tuple[int, float]:
    """``step`` (it returns messages done) in a loop for ``seconds``."""
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        n += step()
    return n, time.perf_counter() - t0


def client_main(url: str, path: str, payload: bytes, seconds: float) -> int:
    """One client process: connect, say ready, wait for the common start, send for
    ``seconds``, print ``messages seconds user_s system_s``."""
    conn = RawConnection(url, path, payload)
    conn.send()
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    before = os.times()

    def step() -> int:
        conn.send()
        return 1

    n, elapsed = timed_loop(seconds, step)
    after = os.times()
    conn.close()
    print(n, elapsed, after.user - before.user, after.system - before.system, flush=True)
    return 0


if __name__ == "__main__":
    url, path, body_file, seconds = sys.argv[1:5]
    with open(body_file, "rb") as f:
        body = f.read()
    raise SystemExit(client_main(url, path, body, float(seconds)))
