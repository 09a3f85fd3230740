"""Orderly consumption under the store's queue locks (issue 12.5): consumers joining and leaving
while per-queue sequences flow never consume a queue's message out of order, twice, or on two
consumers at once, even when the listener is slower than the hand-over grace."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.listener import OrderlyResult
from clepsydra_client.producer import OutgoingMessage
from tests.fixtures.processes import wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.message import Message
    from clepsydra_client.producer import Producer
    from clepsydra_client.push import PushConsumer
    from tests.integration.client.conftest import ClientStack, Consumers, Names

pytestmark = pytest.mark.integration

QUEUES = 3
SLOW_EVERY = 6
SLOW_S = 1.3
"""Every 6th message of a queue takes 1.3 s: longer than the hand-over grace (1.1 s with the
test heartbeat of 0.3 s), so without the lock the next owner would start beside it."""


class Intervals:
    """What each listener call did: (queue id, sequence, client, start, end)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, str, float, float]] = []

    def listener(self, client: list[str]) -> Any:
        def consume(messages: list[Message], context: Any) -> OrderlyResult:
            for m in messages:
                start = time.monotonic()
                seq = int(m.text.split(":")[1])
                time.sleep(SLOW_S if seq % SLOW_EVERY == SLOW_EVERY - 1 else 0.005)
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
    # issue 12.5: a queue is consumed only under its store lock
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

    wait_until(all_consumed, 60, 0.1, what=f"every sequence consumed (sent {sent})")
    clients = set()
    for queue_id, rows in intervals.per_queue().items():
        assert [seq for seq, _, _, _ in rows] == list(range(sent[queue_id])), \
            f"queue {queue_id}: consumed out of order or twice"
        for (_, a, _, a_end), (seq, b, b_start, _) in itertools.pairwise(rows):
            assert b_start >= a_end, f"queue {queue_id}: seq {seq} on {b} began while {a} " \
                                     "was still consuming the one before"
        clients |= {client for _, client, _, _ in rows}
    assert len(clients) >= 4  # the queues really moved between consumers
