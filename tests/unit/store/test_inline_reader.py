"""The strict HTTP/1.1 reader of the produce requests the store worker's poller thread answers
itself (inline.py, DEC-poller-produce): the one shape it takes (the request lines of the route
table's poller lane), everything else left to gunicorn, and nothing taken before it arrived whole
(slow clients)."""

from __future__ import annotations

import pytest

from clepsydra_store import inline
from clepsydra_store.inline import (
    MAX_HEAD_BYTES,
    PollerRequest,
    Served,
    Verdict,
    read_request,
    serve,
    serve_group,
)
from clepsydra_web.slow_clients import READY_BYTES

REMOTE = ("127.0.0.1", 40000)
LIMIT = 1 << 20
BODY = b'{"body":"hi"}'
ONE, BATCH = "messages.produce_message", "messages.produce_batch"
"""The endpoints of the poller lane's two routes."""


def request(path: str = "/v1/topics/orders/messages", body: bytes = BODY,
            fields: str = "Host: x\r\nContent-Type: application/json\r\n",
            length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return (f"POST {path} HTTP/1.1\r\n{fields}Content-Length: {size}\r\n\r\n").encode() + body


def test_a_produce_request_is_read_with_its_environ() -> None:
    raw = request(fields="Host: x\r\nAuthorization: Bearer t\r\ntraceparent: 00-a-b-01\r\n")
    got, end = read_request(raw, 0, LIMIT, REMOTE)
    assert isinstance(got, PollerRequest) and end == len(raw)
    assert (got.args["topic"], got.endpoint, got.body) == ("orders", ONE, BODY)
    env = got.environ
    assert env["PATH_INFO"] == "/v1/topics/orders/messages"
    assert env["HTTP_AUTHORIZATION"] == "Bearer t"
    assert env["HTTP_TRACEPARENT"] == "00-a-b-01"
    assert env["CONTENT_LENGTH"] == str(len(BODY))
    assert (env["REMOTE_ADDR"], env["REMOTE_PORT"]) == ("127.0.0.1", "40000")


def test_the_white_space_around_a_field_value_is_not_part_of_it() -> None:
    raw = request(fields="Host: x\r\nAuthorization: \t Bearer t \t \r\nX-Empty: \t \r\n"
                         "traceparent:00-a-b-01  \r\n")
    got, _ = read_request(raw, 0, LIMIT, REMOTE)
    assert isinstance(got, PollerRequest)
    assert (got.environ["HTTP_AUTHORIZATION"], got.environ["HTTP_X_EMPTY"],
            got.environ["HTTP_TRACEPARENT"]) == ("Bearer t", "", "00-a-b-01")


def test_pipelined_requests_are_read_one_after_the_other() -> None:
    raw = request() + request("/v1/topics/orders/messages/batch", b'{"messages":[]}')
    first, end = read_request(raw, 0, LIMIT, REMOTE)
    second, end2 = read_request(raw, end, LIMIT, REMOTE)
    assert isinstance(first, PollerRequest) and isinstance(second, PollerRequest)
    assert second.endpoint == BATCH and second.body == b'{"messages":[]}' and end2 == len(raw)


@pytest.mark.parametrize("raw", [
    request()[:10],                                         # half a request line
    request()[:-3],                                         # the body not all there
    request().split(b"\r\n\r\n")[0] + b"\r\n",              # the head not ended
])
def test_a_request_not_arrived_whole_waits(raw: bytes) -> None:
    assert read_request(raw, 0, LIMIT, REMOTE)[0] == Verdict.INCOMPLETE


@pytest.mark.parametrize("raw", [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    request("/v1/topics/%25RETRY%25G/messages"),            # percent-encoded: gunicorn decodes
    request("/v1/topics/orders/messages?x=1"),
    request("/v1/topics/orders/other"),
    request().replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    request(fields="Host: x\r\nConnection: close\r\n"),
    request(fields="Host: x\r\nExpect: 100-continue\r\n"),
    request(fields="Host: x\r\nX_Odd: 1\r\n"),              # gunicorn drops "_" headers
    request(fields="Host: x\r\nHost: y\r\n"),               # repeated: gunicorn joins them
    request(fields="Host: x\r\n folded\r\n"),               # obs-fold: gunicorn refuses it
    request(fields="Host: x\r\nContent-Length: 13\r\n"),    # two lengths
    request(fields="Host: x\r\nBad\x01: v\r\n"),
    request(fields="X: " + "v" * MAX_HEAD_BYTES + "\r\n"),  # over gunicorn's field limit
    b"POST /v1/topics/orders/messages HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"POST /v1/topics/orders/messages HTTP/1.1\r\nHost: x\r\n\r\n",  # no length
])
def test_anything_else_goes_to_gunicorn_once_whole(raw: bytes) -> None:
    assert read_request(raw, 0, LIMIT, REMOTE) == (Verdict.HANDOVER, 0)
    assert read_request(raw, 0, LIMIT, REMOTE) == (Verdict.HANDOVER, 0)  # its head read before


def test_a_head_read_before_gives_each_request_an_environ_of_its_own() -> None:
    """The header fields of a head are read once (``FIELDS_CACHE_SIZE``); each request still
    gets its own environ, with its own connection's address."""
    raw = request(fields="Host: x\r\nAuthorization: Bearer t\r\n")
    first, _ = read_request(raw, 0, LIMIT, REMOTE)
    first.environ["HTTP_AUTHORIZATION"] = "changed"  # type: ignore[union-attr]
    second, end = read_request(raw, 0, LIMIT, ("127.0.0.1", 40001))
    assert isinstance(second, PollerRequest) and end == len(raw)
    assert second.environ["HTTP_AUTHORIZATION"] == "Bearer t"
    assert (second.environ["REMOTE_PORT"], second.environ["CONTENT_LENGTH"]) == \
        ("40001", str(len(BODY)))


def test_each_request_keeps_its_own_traceparent_while_the_rest_of_its_head_is_read_once() -> None:
    inline._FIELDS_READ.clear()
    got = []
    for parent in ("00-a-b-01", "00-c-d-00", "00-e-f-01"):
        raw = request(fields=f"Host: x\r\ntraceparent: {parent}\r\nAccept: */*\r\n")
        one, _ = read_request(raw, 0, LIMIT, REMOTE)
        assert isinstance(one, PollerRequest)
        got.append((one.environ["HTTP_TRACEPARENT"], one.environ["HTTP_ACCEPT"]))
    assert got == [("00-a-b-01", "*/*"), ("00-c-d-00", "*/*"), ("00-e-f-01", "*/*")]
    assert len(inline._FIELDS_READ) == 1  # the head but its traceparent


@pytest.mark.parametrize("fields", [
    "traceparent: 00-a-b-01\r\nHost: x\r\ntraceparent: 00-c-d-01\r\n",
    "Host: x\r\ntraceparent: 00-a-b-01\r\nTraceparent: 00-c-d-01\r\n",
    "Host: x\r\ntraceparent: 00-a-b-01\r\n folded\r\n",
])
def test_a_repeated_or_odd_traceparent_goes_to_gunicorn(fields: str) -> None:
    for _ in range(2):
        assert read_request(request(fields=fields), 0, LIMIT, REMOTE) == (Verdict.HANDOVER, 0)


def test_the_heads_read_before_are_bounded() -> None:
    inline._FIELDS_READ.clear()
    for i in range(inline.FIELDS_CACHE_SIZE + 10):
        assert isinstance(read_request(request(fields=f"Host: x{i}\r\n"), 0, LIMIT,
                                       REMOTE)[0], PollerRequest)
        assert len(inline._FIELDS_READ) <= inline.FIELDS_CACHE_SIZE
    inline._FIELDS_READ.clear()
    long = request(fields="X-Long: " + "v" * inline.FIELDS_CACHED_BYTES + "\r\n")
    assert isinstance(read_request(long, 0, LIMIT, REMOTE)[0], PollerRequest)
    assert not inline._FIELDS_READ


def test_a_large_produce_request_is_read_whole_here() -> None:
    """A batch larger than a thread's hand-over size stays on the poller (DEC-poller-produce:
    gunicorn's thread path cost ~3 us a message of a 100-message batch); ``need`` says how much
    to read."""
    size = READY_BYTES * 2
    raw = request("/v1/topics/orders/messages/batch", body=b"x" * size)
    head = len(raw) - size
    for arrived in (head + 100, head + READY_BYTES, len(raw) - 1):
        assert read_request(raw[:arrived], 0, LIMIT, REMOTE) == (Verdict.INCOMPLETE, len(raw))
        partial = serve(raw[:arrived], _never, LIMIT, REMOTE, "DATE")
        assert (partial.count, partial.verdict, partial.need) == (0, Verdict.INCOMPLETE, len(raw))
    got, end = read_request(raw, 0, LIMIT, REMOTE)
    assert isinstance(got, PollerRequest) and got.endpoint == BATCH
    assert got.body == b"x" * size and end == len(raw)


def test_a_large_request_of_another_route_goes_to_a_thread_once_ready_bytes_arrived() -> None:
    head = b"PUT /v1/groups/g/offsets HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (
        READY_BYTES * 2)
    assert read_request(head + b"x" * 100, 0, LIMIT, REMOTE) == (Verdict.INCOMPLETE, 0)
    assert read_request(head + b"x" * READY_BYTES, 0, LIMIT, REMOTE) == (Verdict.HANDOVER, 0)
    assert serve(head + b"x" * 100, _never, LIMIT, REMOTE, "DATE").need == 0


def test_a_produce_body_over_the_limit_goes_to_a_thread_once_whole() -> None:
    raw = request(body=b"x" * 100)
    assert read_request(raw[:-1], 0, 50, REMOTE) == (Verdict.INCOMPLETE, 0)


def _never(request: PollerRequest) -> tuple[str, list[tuple[str, str]], bytes]:
    raise AssertionError("nothing is answered before it arrived whole")


def test_a_body_over_the_request_limit_is_read_and_refused() -> None:
    raw = request(body=b"x" * 100)
    got, end = read_request(raw, 0, 50, REMOTE)
    assert isinstance(got, PollerRequest) and got.body is None and end == len(raw)  # 413 follows


def test_serve_answers_in_order_and_stops_at_the_first_request_not_its_own() -> None:
    calls: list[tuple[str, bool, bytes | None]] = []

    def answer(request: PollerRequest) -> tuple[str, list[tuple[str, str]], bytes]:
        calls.append((request.args["topic"], request.endpoint == BATCH, request.body))
        return "201 Created", [("Content-Length", "2")], b"{}"

    tail = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    served = serve(request() + request() + tail, answer, LIMIT, REMOTE, "DATE")
    assert served.count == 2 and len(calls) == 2
    assert served.rest == tail and served.verdict == Verdict.HANDOVER
    assert served.out.count(b"HTTP/1.1 201 Created\r\nDate: DATE\r\n") == 2
    assert served.out.endswith(b"Content-Length: 2\r\n\r\n{}")
    partial = serve(request() + request()[:20], answer, LIMIT, REMOTE, "DATE")
    assert partial.count == 1 and partial.verdict == Verdict.INCOMPLETE
    assert partial.rest == request()[:20]


def test_serve_group_answers_the_first_single_send_of_each_buffer_together() -> None:
    # DEC-poller-group-append: the first request of each buffer that is a single send goes to
    # one group call (two or more of them), the rest of each buffer after its first, in order
    log: list[object] = []

    def answer(request: PollerRequest) -> tuple[str, list[tuple[str, str]], bytes]:
        log.append(("one", request.body))
        return "201 Created", [], b"one:" + (request.body or b"")

    def group(requests: list[PollerRequest]) -> list[tuple[str, list[tuple[str, str]], bytes]]:
        log.append(("group", [r.body for r in requests]))
        return [("201 Created", [], b"grp:" + (r.body or b"")) for r in requests]

    def groups(request: PollerRequest) -> bool:
        return request.endpoint == ONE

    batch = request("/v1/topics/orders/messages/batch", b'{"messages":[]}')
    tail = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    bufs = [
        (request(body=b"a1") + request(body=b"a2") + tail, REMOTE),  # grouped, a2, the rest
        (batch + request(body=b"b2"), REMOTE),                      # a batch first: not grouped
        (request(body=b"c1"), REMOTE),                              # grouped
        (request(body=b"d1")[:-1], REMOTE),                         # not whole: waits
    ]
    delivered: list[tuple[int, Served]] = []
    serve_group(bufs, answer, groups, group, LIMIT, "DATE",
                lambda i, served: delivered.append((i, served)))
    assert log == [("group", [b"a1", b"c1"]), ("one", b"a2"), ("one", b'{"messages":[]}'),
                   ("one", b"b2")]
    # each answered as soon as it is: the grouped ones first, then the others in order
    assert [i for i, _ in delivered] == [0, 2, 1, 3]
    a, b, c, d = (served for _, served in sorted(delivered, key=lambda x: x[0]))
    assert a.count == 2 and a.out.index(b"grp:a1") < a.out.index(b"one:a2")
    assert a.rest == tail and a.verdict == Verdict.HANDOVER
    assert b.count == 2 and b.out.endswith(b"one:b2") and b.rest == b""
    assert c.count == 1 and c.out.startswith(b"HTTP/1.1 201 Created\r\nDate: DATE\r\n")
    assert c.out.endswith(b"\r\n\r\ngrp:c1") and c.rest == b""
    assert d.count == 0 and d.verdict == Verdict.INCOMPLETE and d.rest == bufs[3][0]


def test_serve_group_of_one_single_send_answers_as_serve_does() -> None:
    # no group of one: the one single send is answered alone, as serve() answers it
    def answer(request: PollerRequest) -> tuple[str, list[tuple[str, str]], bytes]:
        return "201 Created", [], b"one"

    def group(requests: list[PollerRequest]) -> list[tuple[str, list[tuple[str, str]], bytes]]:
        raise AssertionError("no group of one")

    bufs = [(request(), REMOTE), (request("/v1/topics/orders/messages/batch", b"{}"), REMOTE)]
    delivered: list[tuple[int, Served]] = []
    serve_group(bufs, answer, lambda r: r.endpoint == ONE, group, LIMIT, "DATE",
                lambda i, served: delivered.append((i, served)))
    assert [(i, s.out) for i, s in delivered] == [
        (i, serve(buf, answer, LIMIT, REMOTE, "DATE").out) for i, (buf, _) in enumerate(bufs)]


PULL = "queues.pull"
"""The endpoint of the poller lane's pull (DEC-poller-pull)."""


def pull(target: str = "/v1/topics/orders/queues/1/messages?offset=3&max=32&tags=%2A&waitMs=500",
         fields: str = "Host: x\r\n") -> bytes:
    return f"GET {target} HTTP/1.1\r\n{fields}\r\n".encode()


def test_a_pull_is_read_with_its_query_string_and_no_body() -> None:
    # DEC-poller-pull: a GET of the lane, no Content-Length, its query kept as it came (C3)
    raw = pull() + pull("/v1/topics/orders/queues/0/messages")
    got, end = read_request(raw, 0, LIMIT, REMOTE)
    assert isinstance(got, PollerRequest) and got.endpoint == PULL and got.body == b""
    assert got.args == {"topic": "orders", "queueId": "1"}
    assert got.environ["QUERY_STRING"] == "offset=3&max=32&tags=%2A&waitMs=500"
    assert got.environ["PATH_INFO"] == "/v1/topics/orders/queues/1/messages"
    second, end2 = read_request(raw, end, LIMIT, REMOTE)
    assert isinstance(second, PollerRequest) and second.environ["QUERY_STRING"] == ""
    assert end2 == len(raw)


@pytest.mark.parametrize("raw", [
    pull("/v1/topics/orders/queues/1/messages?a=1#frag"),   # a fragment: gunicorn's
    pull("/v1/topics/orders/queues/1/messages?a=b c"),      # a space: not a request line
    pull("/v1/topics/%25RETRY%25G/queues/0/messages"),      # percent-encoded path
    pull(fields="Host: x\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
    b"POST /v1/topics/orders/queues/1/messages HTTP/1.1\r\nHost: x\r\n\r\n",
])
def test_a_pull_of_another_shape_goes_to_gunicorn(raw: bytes) -> None:
    assert read_request(raw, 0, LIMIT, REMOTE) == (Verdict.HANDOVER, 0)


def test_a_request_the_answer_declines_goes_to_a_thread_from_its_first_byte() -> None:
    # DEC-poller-pull: a pull that may wait is a thread's, untouched, after the answers before it
    def answer(request: PollerRequest) -> tuple[str, list[tuple[str, str]], bytes] | None:
        if request.endpoint == PULL and "waitMs" in request.environ["QUERY_STRING"]:
            return None
        return "200 OK", [("Content-Length", "2")], b"{}"

    quick = pull("/v1/topics/orders/queues/1/messages?offset=0")
    served = serve(request() + quick + pull() + request(), answer, LIMIT, REMOTE, "DATE")
    assert served.count == 2 and served.verdict == Verdict.HANDOVER
    assert served.rest == pull() + request()
    assert served.out.count(b"HTTP/1.1 200 OK\r\n") == 2
