"""Produce answered on the store worker's poller thread (worker.py + inline.py; DEC-poller-produce),
with the real process: once a connection is kept alive its produce requests are answered without a
pool thread, pipelined ones in order and in one write, with the same answers as gunicorn's path (bad
JSON, the request size limit naming its setting, access control); whatever else arrives on the
connection is still gunicorn's; half a request never holds a thread. The count of poller answers is
``clepsydra_store_poller_answered_requests_total`` (0 with ``CLEPSYDRA_STORE_INLINE_PRODUCE=false``,
which answers the same)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.store_api.helpers import TOPIC
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration

ANSWER_S = 10.0  # a hang, not a speed
ADMIN = "clp_inline-admin-token-0123456789"


def produce(body: bytes, *, fields: str = "", batch: bool = False) -> bytes:
    path = f"/v1/topics/{TOPIC}/messages{'/batch' if batch else ''}"
    return (f"POST {path} HTTP/1.1\r\nHost: store\r\nContent-Type: application/json\r\n"
            f"{fields}Content-Length: {len(body)}\r\n\r\n").encode() + body


def get(path: str, fields: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: store\r\n{fields}\r\n".encode()


class Conversation:
    """One kept-alive connection, answers read in order."""

    opened: list[socket.socket] = []

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=ANSWER_S)
        self.opened.append(self.sock)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self) -> tuple[int, dict[str, str], Any]:
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip()
                  for k, _, v in (line.partition(":") for line in lines[1:])}
        size = int(fields["content-length"])
        while len(self.buf) < size:
            self._more()
        body, self.buf = self.buf[:size], self.buf[size:]
        return int(lines[0].split()[1]), fields, json.loads(body) if body else None

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "the store closed the connection"
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    while Conversation.opened:
        Conversation.opened.pop().close()


def poller_answers(url: str, fields: str = "",
                   metric: bytes = b"clepsydra_store_poller_answered_requests_total") -> float:
    talk = Conversation(url)
    try:
        talk.send(get("/metrics", fields).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        data = b""
        while chunk := talk.sock.recv(65536):
            data += chunk
    finally:
        talk.close()
    found = re.search(rb"^" + metric + rb" (\S+)$", data, re.M)
    assert found, data[-2000:]
    return float(found.group(1))


def create_topic(url: str, fields: str = "") -> None:
    talk = Conversation(url)
    body = json.dumps({"name": TOPIC, "queues": 1}).encode()
    talk.send(f"POST /v1/topics HTTP/1.1\r\nHost: s\r\n{fields}Content-Length: {len(body)}"
              "\r\n\r\n".encode() + body)
    assert talk.answer()[0] == 201
    talk.close()


@pytest.mark.parametrize("inline", [True, False])
def test_pipelined_produce_is_answered_in_order_on_the_poller(
        start_store: Callable[..., HttpService], inline: bool) -> None:
    url = start_store(env={"CLEPSYDRA_STORE_INLINE_PRODUCE": str(inline).lower()}).url
    create_topic(url)
    talk = Conversation(url)
    talk.send(produce(b'{"body":"first"}'))  # a new connection: a pool thread answers
    assert talk.answer()[0] == 201
    talk.send(produce(b'{"body":"m1"}') + produce(b'{"body":"m2","tags":"t"}')
              + produce(b'{"messages":[{"body":"b1"},{"body":"b2"}]}', batch=True)
              + get("/healthz") + produce(b'{"body":"after"}'))
    answers = [talk.answer() for _ in range(5)]
    assert [a[0] for a in answers] == [201, 201, 201, 200, 201]
    offsets = [answers[0][2]["queueOffset"], answers[1][2]["queueOffset"],
               *(r["queueOffset"] for r in answers[2][2]["results"]),
               answers[4][2]["queueOffset"]]
    assert offsets == [1, 2, 3, 4, 5]  # stored in the order sent
    assert answers[3][2] == {"status": "ok", "writable": True}
    assert answers[0][1]["content-type"] == "application/json"
    assert answers[0][1]["connection"] == "keep-alive"
    talk.send(produce(b'{"body":"again"}'))
    assert talk.answer()[0] == 201
    talk.close()
    # m1, m2, the batch and "again"; "first" and "after" came in with gunicorn's requests
    assert poller_answers(url) == (4 if inline else 0)


def test_bad_requests_get_the_same_answers_on_the_poller(
        start_store: Callable[..., HttpService]) -> None:
    url = start_store(env={"CLEPSYDRA_STORE_MAX_REQUEST_BYTES": "2048",
                           "CLEPSYDRA_STORE_MAX_BODY_BYTES": "1000"}).url
    create_topic(url)
    talk = Conversation(url)
    talk.send(produce(b'{"body":"warm"}'))
    assert talk.answer()[0] == 201
    talk.send(produce(b"{oops"))
    status, _, body = talk.answer()
    assert (status, body["error"]) == (400, "INVALID_JSON")
    # SPEC P1, DEC-too-large-413: the request over its limit, a message body over its limit
    # (single or in a batch): one status and one code, nothing stored
    talk.send(produce(b'{"body":"' + b"x" * 3000 + b'"}'))
    status, _, body = talk.answer()
    assert (status, body["error"]) == (413, "BODY_TOO_LARGE")
    assert "CLEPSYDRA_STORE_MAX_REQUEST_BYTES" in body["message"]
    talk.send(produce(b'{"body":"' + b"x" * 1001 + b'"}'))
    status, _, body = talk.answer()
    assert (status, body["error"]) == (413, "BODY_TOO_LARGE") and "SPEC P1" in body["message"]
    talk.send(produce(b'{"messages":[{"body":"a"},{"body":"' + b"x" * 1001 + b'"}]}',
                      batch=True))
    status, _, body = talk.answer()
    assert (status, body["error"]) == (413, "BODY_TOO_LARGE") and "messages[1]" in body["message"]
    talk.send(produce(b'{"body":"x","delayLevel":-1}'))
    status, _, body = talk.answer()
    assert (status, body["error"]) == (400, "INVALID_DELAY_LEVEL")
    talk.send(produce(b'{"body":"still served"}'))
    assert talk.answer()[0] == 201
    talk.send(get(f"/v1/topics/{TOPIC}"))
    assert talk.answer()[2]["queues"][0]["maxOffset"] == 2  # "warm" and "still served" only
    talk.close()
    assert poller_answers(url) == 6


def test_access_control_on_the_poller(start_store: Callable[..., HttpService]) -> None:
    url = start_store(env={"CLEPSYDRA_AUTH": "on", "CLEPSYDRA_AUTH_ADMIN_TOKEN": ADMIN}).url
    bearer = f"Authorization: Bearer {ADMIN}\r\n"
    create_topic(url, bearer)
    talk = Conversation(url)
    talk.send(produce(b'{"body":"warm"}', fields=bearer))
    assert talk.answer()[0] == 201
    talk.send(produce(b'{"body":"no token"}')
              + produce(b'{"body":"wrong"}', fields="Authorization: Bearer clp_nope\r\n")
              + produce(b'{"body":"ok"}', fields=bearer))
    (s1, f1, b1), (s2, _, b2), (s3, _, _) = (talk.answer() for _ in range(3))
    assert (s1, b1["error"]) == (401, "UNAUTHORIZED")
    assert f1["www-authenticate"].startswith("Bearer")
    assert (s2, b2["error"], s3) == (401, "UNAUTHORIZED", 201)
    talk.close()
    assert poller_answers(url, bearer) == 3


def test_half_a_request_on_kept_alive_connections_holds_no_thread(
        start_store: Callable[..., HttpService]) -> None:
    url = start_store(env={"CLEPSYDRA_STORE_THREADS": "2"}).url
    create_topic(url)
    silent = []
    for _ in range(6):
        talk = Conversation(url)
        talk.send(produce(b'{"body":"warm"}'))
        assert talk.answer()[0] == 201
        talk.send(produce(b'{"body":"never finished"}')[:-5])
        silent.append(talk)
    trickled = Conversation(url)
    trickled.send(produce(b'{"body":"warm"}'))
    assert trickled.answer()[0] == 201
    raw = produce(b'{"body":"a few bytes at a time"}')
    for i in range(0, len(raw), 7):
        trickled.send(raw[i:i + 7])
    assert trickled.answer()[0] == 201
    other = Conversation(url)
    other.send(get("/healthz"))
    assert other.answer()[0] == 200
    for talk in (*silent, trickled, other):
        talk.close()


def _large_batch(count: int) -> bytes:
    """A batch body well over the 64 KiB a thread would take it at (READY_BYTES)."""
    return json.dumps({"messages": [{"body": f"{i:04d}" + "x" * 1020, "keys": f"k{i}"}
                                    for i in range(count)]}).encode()


def test_a_large_batch_is_answered_on_the_poller(
        start_store: Callable[..., HttpService]) -> None:
    """A batch of any size within the request limit
    is read whole and answered by the poller, not by gunicorn's thread path; every message is
    stored, in order."""
    url = start_store().url
    create_topic(url)
    talk = Conversation(url)
    talk.send(produce(b'{"body":"warm"}'))
    assert talk.answer()[0] == 201
    body = _large_batch(300)
    assert len(body) > 4 * 65536
    for _ in range(2):
        talk.send(produce(body, batch=True))
        status, _, answer = talk.answer()
        assert status == 201 and len(answer["results"]) == 300
    offsets = [r["queueOffset"] for r in answer["results"]]
    assert offsets == list(range(301, 601))
    talk.close()
    assert poller_answers(url) == 2


def test_half_a_large_batch_holds_no_thread(start_store: Callable[..., HttpService]) -> None:
    """A large batch stays on the poller until it arrived whole (the slow-client guard): clients
    that stop half-way through one hold no pool thread."""
    url = start_store(env={"CLEPSYDRA_STORE_THREADS": "2"}).url
    create_topic(url)
    raw = produce(_large_batch(200), batch=True)
    stalled = []
    for _ in range(4):
        talk = Conversation(url)
        talk.send(produce(b'{"body":"warm"}'))
        assert talk.answer()[0] == 201
        talk.send(raw[:len(raw) // 2])
        stalled.append(talk)
    other = Conversation(url)
    other.send(get("/healthz"))
    assert other.answer()[0] == 200
    stalled[0].send(raw[len(raw) // 2:])  # the rest arrives: answered
    status, _, answer = stalled[0].answer()
    assert status == 201 and len(answer["results"]) == 200
    for talk in (*stalled, other):
        talk.close()


def test_a_large_batch_sent_in_small_pieces_is_answered_whole(
        start_store: Callable[..., HttpService]) -> None:
    """The poller keeps the pieces of a batch still arriving and reads it once whole: every
    message stored, the same answer as sent at once."""
    url = start_store().url
    create_topic(url)
    talk = Conversation(url)
    talk.send(produce(b'{"body":"warm"}'))
    assert talk.answer()[0] == 201
    talk.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    raw = produce(_large_batch(250), batch=True) + produce(b'{"body":"next"}')
    for i in range(0, len(raw), 1500):
        talk.send(raw[i:i + 1500])
    status, _, answer = talk.answer()
    assert status == 201 and [r["queueOffset"] for r in answer["results"]] == list(range(1, 251))
    status, _, single = talk.answer()
    assert status == 201 and single["queueOffset"] == 251
    talk.close()
    assert poller_answers(url) == 2


SPUN = b"clepsydra_store_poller_spin_caught_requests_total"


@pytest.mark.parametrize(("spin_us", "pause_s", "spins"), [(10_000, 0.0, True),
                                                           (0, 0.0, False),
                                                           (2_000, 0.02, False)])
def test_the_poller_spins_for_a_producer_in_a_loop_only(
        start_store: Callable[..., HttpService], spin_us: int, pause_s: float,
        spins: bool) -> None:
    # DEC-poller-spin: after answering a produce the poller looks for the next request without
    # sleeping (CLEPSYDRA_STORE_POLLER_SPIN_US), but only while requests come within the spin
    # of the answer before: a producer at its own pace (here 20 ms apart, 2 ms spin) or a spin
    # of 0 leaves the poller asleep between requests
    import time

    url = start_store(env={"CLEPSYDRA_STORE_POLLER_SPIN_US": str(spin_us)}).url
    create_topic(url)
    talk = Conversation(url)
    for i in range(20):
        talk.send(produce(b'{"body":"m%d"}' % i))
        assert talk.answer()[0] == 201
        time.sleep(pause_s)
    talk.close()
    assert poller_answers(url) == 19  # the first came on a new connection: gunicorn's
    caught = poller_answers(url, metric=SPUN)
    assert caught >= 10 if spins else caught == 0


def metric(url: str, name: str) -> float:
    """A sample of the store's /metrics (0 when it has none yet)."""
    talk = Conversation(url)
    try:
        talk.send(get("/metrics").replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        data = b""
        while chunk := talk.sock.recv(65536):
            data += chunk
    finally:
        talk.close()
    found = re.search(rb"^" + re.escape(name.encode()) + rb" (\S+)$", data, re.M)
    return float(found.group(1)) if found else 0.0


def pull(offset: int, wait_ms: int | None = None, max_count: int = 32) -> bytes:
    query = f"offset={offset}&max={max_count}&tags=%2A" + (
        f"&waitMs={wait_ms}" if wait_ms is not None else "")
    return get(f"/v1/topics/{TOPIC}/queues/0/messages?{query}")


@pytest.mark.parametrize("inline", [True, False])
def test_a_pull_that_cannot_wait_is_answered_on_the_poller_and_one_that_may_by_a_thread(
        start_store: Callable[..., HttpService], inline: bool) -> None:
    # DEC-poller-pull, DEC-pull-hold, SPEC C3: a kept-alive consumer's pull with messages
    # there (or no waitMs) is answered on the poller; one at the queue's end waits in a
    # thread, the poller meanwhile answering produces, and is woken by one; the answers, the
    # pull's metrics and the hold are the same with the poller's answers off
    url = start_store(env={"CLEPSYDRA_STORE_INLINE_PRODUCE": str(inline).lower()}).url
    create_topic(url)
    producer, consumer = Conversation(url), Conversation(url)
    for body in (b'{"body":"m0"}', b'{"body":"m1"}', b'{"body":"m2"}'):
        producer.send(produce(body))
        assert producer.answer()[0] == 201  # the first by a thread, then on the poller
    consumer.send(pull(0, max_count=1))  # a new connection: a thread answers
    first = consumer.answer()
    assert first[0] == 200 and [m["body"] for m in first[2]["messages"]] == ["m0"]
    consumer.send(pull(1, wait_ms=30_000))  # messages there: it cannot wait
    there = consumer.answer()
    assert [m["body"] for m in there[2]["messages"]] == ["m1", "m2"]
    assert there[2]["nextOffset"] == 3
    consumer.send(pull(3, wait_ms=30_000))  # at the end: held, in a thread
    wait_until(lambda: metric(url, "clepsydra_store_engine_held_pulls") == 1, ANSWER_S,
               what="the pull held")
    producer.send(produce(b'{"body":"late"}'))  # answered while the pull is held
    assert producer.answer()[0] == 201
    held = consumer.answer()  # woken by the append (a held poller would answer in 30 s)
    assert held[0] == 200 and [m["body"] for m in held[2]["messages"]] == ["late"]
    consumer.send(pull(0, wait_ms=0, max_count=1) + pull(4, max_count=1))  # pipelined
    again = [consumer.answer(), consumer.answer()]
    assert [(a[0], len(a[2]["messages"])) for a in again] == [(200, 1), (200, 0)]
    assert metric(url, "clepsydra_store_engine_held_pulls") == 0
    pulls = metric(url, 'clepsydra_store_requests_total{operation="pull",status="200"}')
    assert pulls == 5  # each pull counted once, the one handed to a thread too
    # on the poller: m1, m2, late (produces), the pull with messages there, the last two
    assert poller_answers(url) == (6 if inline else 0)
