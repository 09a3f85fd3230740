"""Single sends that several kept-alive connections have ready in one pass of the store worker's
poller are appended as one batch (DEC-poller-group-append; worker.py, inline.py,
``MessageStore.put_group``), each connection answered as before: its own ids and offsets, a bad
request refused alone with the error naming its rule and nothing of it stored, one connection's
requests in order.

The pass is made deterministic by stopping the worker process (SIGSTOP) while the clients send,
then letting it go on (SIGCONT): its poller then finds every connection readable at once. That
the group was one append is read from the kernel's count of the worker's write calls
(``syscw`` of ``/proc/<pid>/io``: ``pwrite`` to the CommitLog and the ConsumeQueue files count,
a socket's ``send`` does not): one append of N messages to one queue writes the CommitLog once
and the queue once, N appends write them N times each. The flush thread, which writes too, is
kept out of the way by a flush interval of a minute."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.store_api.helpers import TOPIC
from tests.integration.store_api.test_inline_produce import (
    Conversation,
    create_topic,
    get,
    poller_answers,
    produce,
    pull,
)
from tools.processes import HttpService

pytestmark = pytest.mark.integration

QUIET_FLUSH = {"CLEPSYDRA_STORE_FLUSH_INTERVAL_MS": "60000"}
SETTLE_S = 0.3
"""Time for the requests sent to the stopped worker to be in its sockets' buffers (loopback)."""


def worker_pid(service: HttpService) -> int:
    pid = service.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def write_calls(pid: int) -> int:
    """The write system calls the process made so far (its threads' included)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "syscw":
            return int(value)
    raise AssertionError("no syscw in /proc/<pid>/io")


def all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in the stopped state (``T`` in its ``stat``)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # a thread gone meanwhile
        if state != "T":
            return False
    return True


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The worker stopped while the block runs; on again after ``SETTLE_S``. The signal is
    delivered asynchronously: the block starts once every thread is seen stopped, else the
    poller, still waiting in ``epoll_wait``, could wake for the first request sent and take it
    in a pass of its own (two appends where one is asserted, seen under load)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10.0
        while not all_threads_stopped(pid):
            assert time.monotonic() < deadline, "the worker did not stop"
            time.sleep(0.005)
        yield
        time.sleep(SETTLE_S)
    finally:
        os.kill(pid, signal.SIGCONT)


def kept_alive(url: str, n: int) -> list[Conversation]:
    """``n`` connections whose first request (a pool thread's) was answered, back on the poller
    (a pull of nothing: nothing stored). Back means a round of pulls all answered there (the
    poller's count grew by ``n``): a thread slow to hand its connection back under load would
    otherwise answer that connection's send outside the pass."""
    talks = [Conversation(url) for _ in range(n)]
    empty_pull = get(f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max=1")
    for talk in talks:
        talk.send(empty_pull)
        assert talk.answer()[0] == 200
    for _ in range(50):
        time.sleep(SETTLE_S)  # each connection handed back to the poller
        before = poller_answers(url)
        for talk in talks:
            talk.send(empty_pull)
            assert talk.answer()[0] == 200
        if poller_answers(url) - before == n:
            return talks
    raise AssertionError("the connections never came back to the poller")


def writes_of_one_send(pid: int, talk: Conversation, body: bytes) -> int:
    """The write calls of one single send (after a first one: the queue's files made)."""
    for _ in range(2):
        before = write_calls(pid)
        talk.send(produce(body))
        assert talk.answer()[0] == 201
    return write_calls(pid) - before


def stored(url: str) -> list[dict[str, Any]]:
    talk = Conversation(url)
    talk.send(pull(0))
    status, _, answer = talk.answer()
    assert status == 200, answer
    return list(answer["messages"])


def test_single_sends_ready_together_are_one_append_each_answered_with_its_own_ids(
        start_store: Callable[..., HttpService]) -> None:
    # SPEC P2: each acknowledged after its append; DEC-poller-group-append: one append for the
    # group, each answer its own message's placement
    service = start_store(env=QUIET_FLUSH)
    url = service.url
    create_topic(url)  # 1 queue: one ConsumeQueue file
    talks = kept_alive(url, 4)
    pid = worker_pid(service)
    one = writes_of_one_send(pid, talks[0], b'{"body":"warm"}')  # queue offsets 0 and 1
    before = write_calls(pid)
    with stopped(pid):
        for i, talk in enumerate(talks):
            talk.send(produce(b'{"body":"g%d","tags":"t%d"}' % (i, i)))
    answers = [talk.answer() for talk in talks]
    writes = write_calls(pid) - before
    assert [a[0] for a in answers] == [201] * 4, answers
    bodies = {m["queueOffset"]: m for m in stored(url)}
    seen = set()
    for i, (_, _, answer) in enumerate(answers):
        message = bodies[answer["queueOffset"]]  # the answer names where its own body is
        assert message["body"] == f"g{i}" and message["tags"] == f"t{i}"
        assert message["msgId"] == answer["msgId"]
        assert message["commitLogOffset"] == answer["commitLogOffset"]
        seen.add(answer["msgId"])
    assert len(seen) == 4
    assert sorted(a[2]["queueOffset"] for a in answers) == [2, 3, 4, 5]
    # one append: written as one send is (4 appends: 4 times that)
    assert writes == one, (writes, one)


def test_a_bad_request_in_the_group_is_refused_alone_and_nothing_of_it_stored(
        start_store: Callable[..., HttpService]) -> None:
    # SPEC P1 (reserved property), L2 (no such delay level), a topic that does not exist; bad
    # JSON: each answered with its own error, the good ones stored with one append
    service = start_store(env=QUIET_FLUSH)
    url = service.url
    create_topic(url)
    talks = kept_alive(url, 6)
    pid = worker_pid(service)
    one = writes_of_one_send(pid, talks[0], b'{"body":"warm"}')
    fifty_years_ms = 50 * 365 * 86_400_000  # under the wire's limit, past the store's (T1)
    requests = [
        produce(b'{"body":"good-0"}'),
        produce(b'{"body":"bad","properties":{"REAL_TOPIC":"x"}}'),
        produce(b'{"body":"good-1"'),  # not JSON
        produce(b'{"body":"bad","delayMs":%d}' % fifty_years_ms),
        produce(b'{"body":"bad"}').replace(f"/topics/{TOPIC}/".encode(), b"/topics/missing/"),
        produce(b'{"body":"good-2"}'),
    ]
    before = write_calls(pid)
    with stopped(pid):
        for talk, request in zip(talks, requests, strict=True):
            talk.send(request)
    answers = [talk.answer() for talk in talks]
    writes = write_calls(pid) - before
    statuses = [a[0] for a in answers]
    assert statuses[0] == statuses[5] == 201, answers
    errors = [a[2] for a in answers]
    assert statuses[1] == 400 and "SPEC P1" in errors[1]["message"], errors[1]
    assert statuses[2] == 400 and errors[2]["error"] == "INVALID_JSON", errors[2]
    assert statuses[3] == 400 and "SPEC T1" in errors[3]["message"], errors[3]
    assert statuses[4] == 404 and errors[4]["error"] == "TOPIC_NOT_EXIST", errors[4]
    # nothing of the bad ones; the good ones one append (as one send)
    assert [m["body"] for m in stored(url)] == ["warm", "warm", "good-0", "good-2"]
    assert writes == one, (writes, one)
    # the connections of the refused requests still serve
    for talk in talks[1:5]:
        talk.send(produce(b'{"body":"later"}'))
        assert talk.answer()[0] == 201


def test_a_connections_requests_keep_their_order_with_the_group(
        start_store: Callable[..., HttpService]) -> None:
    # DEC-poller-group-append: a connection's first single send joins the group, what it
    # pipelined after it is answered after it, in order (SPEC P2: acknowledged after its append)
    service = start_store(env=QUIET_FLUSH)
    url = service.url
    create_topic(url)
    first, second = kept_alive(url, 2)
    pid = worker_pid(service)
    one = writes_of_one_send(pid, second, b'{"body":"warm"}')
    before = write_calls(pid)
    with stopped(pid):
        first.send(produce(b'{"body":"a1"}') + produce(b'{"body":"a2"}')
                   + produce(b'{"messages":[{"body":"a3"},{"body":"a4"}]}', batch=True)
                   + produce(b'{"body":"a5"}'))
        second.send(produce(b'{"body":"b1"}'))
    a = [first.answer() for _ in range(4)]
    b = second.answer()
    writes = write_calls(pid) - before
    assert [x[0] for x in a] == [201] * 4 and b[0] == 201
    offsets = [a[0][2]["queueOffset"], a[1][2]["queueOffset"],
               *(r["queueOffset"] for r in a[2][2]["results"]), a[3][2]["queueOffset"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    bodies = {m["queueOffset"]: m["body"] for m in stored(url)}
    assert [bodies[o] for o in offsets] == ["a1", "a2", "a3", "a4", "a5"]
    assert bodies[b[2]["queueOffset"]] == "b1"
    # four appends, each written as one send is: a1 with b1, a2, the batch, a5 (five without
    # the group)
    assert writes == 4 * one, (writes, one)
