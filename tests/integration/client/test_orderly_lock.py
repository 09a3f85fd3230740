"""Orderly consumption under the store's queue locks (SPEC C1,
DEC-orderly-queue-locks): consumers joining and leaving
while per-queue sequences flow never consume a queue's message out of order, twice, or on two
consumers at once, even when the listener is slower than the hand-over grace."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.listener import ConsumeFromWhere, OrderlyResult
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.message import MessageQueue
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core.runtime.http import HttpClient
from tools.processes import HttpService, wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.message import Message
    from tests.integration.client.conftest import ClientStack, Consumers, Names

pytestmark = pytest.mark.integration

QUEUES = 3
SLOW_EVERY = 6
SLOW_S = 1.3
"""Every 6th message of a queue takes 1.3 s: longer than the hand-over grace (1.1 s with the
test heartbeat of 0.3 s), so without the lock the next owner would start beside it."""


def _slow(_message: Message, seq: int) -> None:
    time.sleep(SLOW_S if seq % SLOW_EVERY == SLOW_EVERY - 1 else 0.005)


class Intervals:
    """What each listener call did: (queue id, sequence, client, start, end)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, str, float, float]] = []

    def listener(self, client: list[str],
                 hold: Callable[[Message, int], None] | None = None) -> Any:
        """Records each message; ``hold(message, seq)`` is the listener's work (default: 5 ms,
        every SLOW_EVERY-th sequence SLOW_S)."""
        def consume(messages: list[Message], context: Any) -> OrderlyResult:
            for m in messages:
                start = time.monotonic()
                seq = int(m.text.split(":")[1])
                (hold or _slow)(m, seq)
                with self.lock:
                    self.rows.append((m.queue_id, seq, client[0], start, time.monotonic()))
            return OrderlyResult.SUCCESS
        return consume

    def per_queue(self) -> dict[int, list[tuple[int, str, float, float]]]:
        out: dict[int, list[tuple[int, str, float, float]]] = defaultdict(list)
        with self.lock:
            for queue_id, seq, client, start, end in self.rows:
                out[queue_id].append((seq, client, start, end))
        for rows in out.values():
            rows.sort(key=lambda r: r[2])
        return out


def test_orderly_consumers_joining_and_leaving_never_overlap_or_reorder(
        stack: ClientStack, admin: AdminClient, producer: Producer, names: Names,
        consumers: Consumers) -> None:
    # SPEC C1: a queue is consumed only under its store lock
    topic, group = names("t"), names("g")
    admin.create_topic(topic, QUEUES)
    intervals = Intervals()
    sent = [0] * QUEUES
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.send_batch(topic, [OutgoingMessage(f"{q}:{sent[q]}", queue_id=q)
                                        for q in range(QUEUES)])
            for q in range(QUEUES):
                sent[q] += 1
            time.sleep(0.15)

    def join() -> PushConsumer:
        client: list[str] = []
        c = consumers(group, topic, intervals.listener(client), orderly=True,
                      lock_renew_interval_s=0.5)
        client.append(c.client_id)
        return c

    producing = threading.Thread(target=produce)
    producing.start()
    try:
        live = [join()]
        for _ in range(3):  # join, join, leave, leave: queues move each time
            time.sleep(1.0)
            live.append(join())
            time.sleep(1.0)
            live.append(join())
            time.sleep(1.0)
            live.pop(0).shutdown()
            time.sleep(1.0)
            live.pop(0).shutdown()
    finally:
        stop.set()
        producing.join()

    def all_consumed() -> bool:
        rows = intervals.per_queue()
        return all(len(rows.get(q, [])) >= sent[q] for q in range(QUEUES))

    # A consumer that left while its listener still ran keeps that queue locked until the
    # store's lock expiry (60 s here, as RocketMQ): it does not unlock what it may still be
    # processing. On a loaded machine that happens, so the wait covers one expiry.
    wait_until(all_consumed, 150, 0.1, what=f"every sequence consumed (sent {sent})")
    clients = set()
    for queue_id, rows in intervals.per_queue().items():
        assert [seq for seq, _, _, _ in rows] == list(range(sent[queue_id])), \
            f"queue {queue_id}: consumed out of order or twice"
        for (_, a, _, a_end), (seq, b, b_start, _) in itertools.pairwise(rows):
            assert b_start >= a_end, f"queue {queue_id}: seq {seq} on {b} began while {a} " \
                                     "was still consuming the one before"
        clients |= {client for _, client, _, _ in rows}
    assert len(clients) >= 3  # the queues really moved between consumers


def test_a_queue_given_up_while_consumed_is_committed_when_its_consumer_stops(
        stack: ClientStack, admin: AdminClient, producer: Producer, names: Names,
        consumers: Consumers) -> None:
    # SPEC C1: a consumer stopping while a queue it gave up at a rebalance is still being
    # consumed waits (shutdown_wait_s) for that listener, commits the queue and unlocks it: the
    # next owner starts after the message at once, instead of consuming it again after the
    # lock's expiry
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 2)
    intervals = Intervals()
    running: set[int] = set()
    slow = {q: threading.Event() for q in range(2)}

    def hold(m: Message, seq: int) -> None:  # each queue's first message, until released
        if seq == 0:
            with intervals.lock:
                running.add(m.queue_id)
            slow[m.queue_id].wait(30)

    first = consumers(group, topic, intervals.listener(["first"], hold), orderly=True,
                      lock_renew_interval_s=0.5)
    producer.send_batch(topic, [OutgoingMessage(f"{q}:0", queue_id=q) for q in range(2)])
    wait_until(lambda: running == {0, 1}, 20, what="both queues' first message in the listener")
    second = consumers(group, topic, intervals.listener(["second"], hold), orderly=True,
                       lock_renew_interval_s=0.5)
    assert first.rebalance is not None
    wait_until(lambda: len(first.rebalance.owned()) == 1, 20,
               what="the first consumer gives a queue up to the second")
    moved = ({MessageQueue(topic, 0), MessageQueue(topic, 1)} - set(first.rebalance.owned())).pop()
    stopping = threading.Thread(target=first.shutdown)
    stopping.start()
    slow[1 - moved.queue_id].set()  # the queue it still owns is done first
    time.sleep(0.5)  # the stop waits for the given-up queue's listener too
    assert stopping.is_alive()
    slow[moved.queue_id].set()
    stopping.join(30)
    assert not stopping.is_alive()
    assert admin.offsets(group, topic)[moved] == 1  # committed behind its message
    producer.send_batch(topic, [OutgoingMessage(f"{q}:1", queue_id=q) for q in range(2)])
    # well inside the store's 60 s lock expiry: the stop gave the lock back
    wait_until(lambda: all(len(intervals.per_queue().get(q, [])) >= 2 for q in range(2)), 20,
               what="the second consumer takes both queues and consumes on")
    time.sleep(1.0)  # time for a second copy to show
    for queue_id, rows in intervals.per_queue().items():
        assert [seq for seq, _, _, _ in rows] == [0, 1], f"queue {queue_id}"
        assert [client for _, client, _, _ in rows] == ["first", "second"]
    with closing(HttpClient(stack.store.url)) as http:
        locks = http.get(f"/v1/groups/{group}/locks")["locks"]
    assert {x["clientId"] for x in locks} == {second.client_id}


def test_a_consumer_whose_lock_is_lost_stops_and_resumes_when_it_is_free(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    # SPEC C1: no lock, no consumption; a lock lost at renewal drops the queue uncommitted
    store = start_store(tmp_path / "home", env={"CLEPSYDRA_STORE_LOCK_EXPIRY_S": "1"})
    topic, group = "locked", "g-locked"
    with Producer(store.url) as producer, closing(HttpClient(store.url)) as http:
        http.post("/v1/topics", {"name": topic, "queues": 1})
        starts: list[float] = []
        lock = threading.Lock()

        def listener(messages: list[Message], context: Any) -> OrderlyResult:
            with lock:
                starts.extend(time.monotonic() for _ in messages)
            time.sleep(0.01)
            return OrderlyResult.SUCCESS

        consumer = PushConsumer(group, store.url, None, heartbeat_interval_s=0.3,
                                persist_interval_s=0.3, pull_idle_max_s=0.05,
                                consume_from_where=ConsumeFromWhere.FIRST,
                                lock_renew_interval_s=2.0)
        consumer.subscribe(topic)
        consumer.register_orderly(listener)
        sent = 0

        def send(n: int) -> None:
            nonlocal sent
            producer.send_batch(topic, [OutgoingMessage(f"m{sent + i}") for i in range(n)])
            sent += n

        consumer.start()
        try:
            send(5)
            wait_until(lambda: len(starts) >= 5, 20, what="first messages consumed")
            # its lock (renewed every 2 s) expires at the store after 1 s: another client
            # takes it, and the consumer must not consume while that one holds it
            body = {"clientId": "intruder", "queues": [{"topic": topic, "queueId": 0}]}
            wait_until(lambda: http.post(f"/v1/groups/{group}/locks", body)["locked"], 10,
                       0.05, what="the lock free for another client")
            taken = time.monotonic()
            held = [True]
            release = threading.Event()

            def hold() -> None:  # the intruder renews its lock like a consumer
                while not release.wait(0.2):
                    held.append(bool(http.post(f"/v1/groups/{group}/locks", body)["locked"]))

            holder = threading.Thread(target=hold)
            holder.start()
            try:
                send(20)
                wait_until(lambda: consumer.stats.snapshot().get("locks_lost", 0) >= 1, 10,
                           what="the consumer sees its lock lost at renewal")
                time.sleep(1.0)
            finally:
                release.set()
                holder.join()
            with lock:
                during = [s for s in starts if s >= taken]
            http.post(f"/v1/groups/{group}/locks/unlock", body)
            assert all(held)
            assert during == []
            wait_until(lambda: len(starts) >= sent, 20, what="consumption resumed")
            locks = http.get(f"/v1/groups/{group}/locks")["locks"]
            assert [x["clientId"] for x in locks] == [consumer.client_id]
        finally:
            consumer.shutdown()
        assert http.get(f"/v1/groups/{group}/locks")["locks"] == []  # unlocked at shutdown
