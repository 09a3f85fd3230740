"""Slow clients may not stall the others: with more connections
trickling half a request than a service has threads, the store and the retry service still
answer everyone else, and a request that arrives a few bytes at a time is still served whole.
Both services run as real processes with two threads each. Before the guard
(clepsydra_web/slow_clients.py), the first test's requests timed out: each trickling
connection held a thread in a blocking read.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from clepsydra_web.slow_clients import READY_BYTES, request_complete
from tests.integration.retry.conftest import LEVELS_1S
from tools.parts import Stack
from tools.processes import HttpService

pytestmark = pytest.mark.integration

THREADS = 2
SLOW = 3 * THREADS
TOPIC = "slow-clients"
ANSWER_S = 10.0  # a hang, not a speed: an answer comes in milliseconds


@dataclass
class Services:
    store: HttpService
    retry: HttpService


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    home = tmp_path_factory.mktemp("slow")
    builder = (Stack(home).with_redis().with_store(CLEPSYDRA_STORE_THREADS=str(THREADS))
               .with_retry(CLEPSYDRA_DELAY_LEVELS=LEVELS_1S,
                           CLEPSYDRA_RETRY_THREADS=str(THREADS)))
    with builder.start() as stack:
        store, retry = stack.store, stack.retry
        assert requests.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 1},
                             timeout=ANSWER_S).status_code == 201
        yield Services(store, retry)


def _half_requests(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that sent half a request head and stay silent."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S)
        s.sendall(b"POST /v1/topics/" + TOPIC.encode() + b"/messages HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    return socks


def _trickle(port: int, raw: bytes, pause_s: float) -> bytes:
    """Send ``raw`` a few bytes at a time; the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as s:
        for i in range(0, len(raw), 7):
            s.sendall(raw[i:i + 7])
            time.sleep(pause_s)
        answer = b""
        while b"\r\n\r\n" not in answer or not _body_done(answer):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _body_done(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return True


@pytest.mark.parametrize("which", ["store", "retry"])
def test_connections_trickling_half_a_request_do_not_stall_others(
        services: Services, which: str) -> None:
    service = getattr(services, which)
    slow = _half_requests(service.port, SLOW)
    try:
        # keep them alive and dribbling while the others are served
        stop = threading.Event()

        def dribble() -> None:
            while not stop.is_set():
                for s in slow:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                stop.wait(0.2)

        dribbler = threading.Thread(target=dribble, daemon=True)
        dribbler.start()
        time.sleep(0.5)
        for _ in range(5):
            assert requests.get(service.url + "/healthz", timeout=ANSWER_S).status_code == 200
        if which == "store":
            sent = requests.post(f"{service.url}/v1/topics/{TOPIC}/messages",
                                 json={"body": "past the slow ones"}, timeout=ANSWER_S)
            assert sent.status_code == 201, sent.text
        stop.set()
        dribbler.join(5)
    finally:
        for s in slow:
            s.close()


def test_a_request_sent_a_few_bytes_at_a_time_is_served_whole(services: Services) -> None:
    body = b'{"body": "' + b"b" * 300 + b'"}'
    raw = (b"POST /v1/topics/" + TOPIC.encode() + b"/messages HTTP/1.1\r\nHost: x\r\n"
           b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
           + b"\r\nConnection: close\r\n\r\n" + body)
    answer = _trickle(services.store.port, raw, 0.01)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
    assert b'"queueOffset"' in answer


def test_what_counts_as_a_whole_request() -> None:
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
    assert not request_complete(b"POST /x HTTP/1.1\r\nHost: x\r\n")
    assert not request_complete(head + b"abc")
    assert request_complete(head + b"abcde")
    assert request_complete(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert request_complete(b"GET / HTTP/1.1\r\ncontent-length : 0 \r\n\r\n")
    chunked = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert not request_complete(chunked + b"5\r\nabcde\r\n")
    assert request_complete(chunked + b"5\r\nabcde\r\n0\r\n\r\n")
    assert request_complete(b"X" * READY_BYTES)  # past one peek: the app reads at its pace


def test_a_request_larger_than_what_is_buffered_is_served(services: Services) -> None:
    # a batch of 300 KiB: it goes to a thread once READY_BYTES arrived, and the thread reads
    # the rest (before, a guard that waited for all of it never let it through)
    messages = [{"body": f"{i:04d}" + "x" * 1020} for i in range(300)]
    sent = requests.post(f"{services.store.url}/v1/topics/{TOPIC}/messages/batch",
                         json={"messages": messages}, timeout=ANSWER_S)
    assert sent.status_code == 201, sent.text[:300]
    assert len(sent.json()["results"]) == 300


@pytest.mark.parametrize("frame", [
    b"\x00\xff\xfe garbage \r\n\r\n",                      # not HTTP at all
    b"POST /v1/topics HTTP/1.1\r\nContent-Length: -5\r\n\r\n",  # a length that cannot be
    b"GET / HTTP/9.9\r\n\r\n",                             # a version nobody speaks
    b"POST /v1/topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n",
    # the same through the store's produce fast path (WSGI, not Flask)
    b"POST /v1/topics/" + TOPIC.encode() + b"/messages HTTP/1.1\r\nTransfer-Encoding: chunked"
    b"\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n",
])
@pytest.mark.parametrize("which", ["store", "retry"])
def test_a_malformed_frame_is_refused_and_the_service_goes_on(
        services: Services, which: str, frame: bytes) -> None:
    service = getattr(services, which)
    with socket.create_connection(("127.0.0.1", service.port), timeout=ANSWER_S) as s:
        s.sendall(frame)
        answer = s.recv(65536)
    # a 4xx in the JSON error shape, or the connection closed without an answer: never a 5xx
    assert answer == b"" or answer.split(b" ", 2)[1].startswith(b"4"), answer[:200]
    assert requests.get(service.url + "/healthz", timeout=ANSWER_S).status_code == 200
