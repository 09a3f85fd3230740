"""Consumer groups on the real store: queues shared by heartbeat + rebalance (C1), moved when
consumers join, leave or die, without loss and without two consumers on one message at once;
a subscription mismatch is reported (C5)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.rebalance import AverageByCircleStrategy
from clepsydra_client.producer import OutgoingMessage
from tools.processes import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from clepsydra_client.admin import AdminClient
    from clepsydra_client.consumer.push import PushConsumer
    from clepsydra_client.message import Message
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import (
        Cli,
        ClientStack,
        ConsumerProcs,
        Consumers,
        Names,
        Recorders,
    )

pytestmark = pytest.mark.integration


def overlapping(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(body, client a, client b) where two consumers held one message at the same time."""
    by_body: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_body[r["body"]].append(r)
    found = []
    for body, rs in by_body.items():
        rs.sort(key=lambda r: r["start"])
        for a, b in itertools.pairwise(rs):
            if a["client"] != b["client"] and b["start"] < a["end"]:
                found.append((body, a["client"], b["client"]))
    return found


def test_eight_queues_three_consumers_then_one_killed(stack: ClientStack, admin: AdminClient,
                                                      producer: Producer, names: Names,
                                                      consumer_procs: ConsumerProcs) -> None:
    # SPEC C1: 3/3/2 split, the dead consumer's queues reassigned after its heartbeats stop,
    # every message consumed, none held by two consumers at once
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 8)
    procs = [consumer_procs(f"c{i}", group=group, topic=topic, sleep_ms=5) for i in range(3)]
    wait_until(lambda: sorted(len(p.owned(topic)) for p in procs) == [2, 3, 3], 30,
               0.1, what="8 queues over 3 consumers")
    owned = [p.owned(topic) for p in procs]
    assert set().union(*owned) == set(range(8))
    assert sum(len(o) for o in owned) == 8  # C1: exactly one owner per queue

    sent: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        batch = 0
        while not stop.is_set():
            bodies = [f"b{batch}-{i}" for i in range(20)]
            producer.send_batch(topic, [OutgoingMessage(b) for b in bodies])
            sent.extend(bodies)
            batch += 1
            time.sleep(0.05)

    producing = threading.Thread(target=produce)
    producing.start()
    try:
        wait_until(lambda: len(procs[1].consumed()) > 30, 30, 0.1, what="c1 consuming")
        victim_queues = procs[1].owned(topic)
        procs[1].kill()  # SIGKILL: no unregister, no final commit
        survivors = [procs[0], procs[2]]
        wait_until(lambda: sorted(len(p.owned(topic)) for p in survivors) == [4, 4], 30,
                   0.1, what="8 queues over the 2 survivors")
        assert set().union(*(p.owned(topic) for p in survivors)) == set(range(8))
        assert victim_queues <= set().union(*(p.owned(topic) for p in survivors))
        time.sleep(1.0)
    finally:
        stop.set()
        producing.join()

    def all_consumed() -> bool:
        got = {r["body"] for p in procs for r in p.consumed()}
        return set(sent) <= got

    wait_until(all_consumed, 60, 0.2, what=f"all {len(sent)} messages consumed")
    records = [r for p in procs for r in p.consumed()]
    assert overlapping(records) == []
    survivors_records = [r for p in survivors for r in p.consumed()]
    counts: dict[str, int] = defaultdict(int)
    for r in survivors_records:
        counts[r["body"]] += 1
    # between live consumers, hand-over never duplicates (only the killed one's
    # unfinished or uncommitted messages may be consumed again)
    killed = {r["body"] for r in procs[1].consumed()}
    assert [b for b, n in counts.items() if n > 1 and b not in killed] == []


def test_graceful_join_and_leave_consume_each_message_once(
        stack: ClientStack, admin: AdminClient, producer: Producer, names: Names,
        consumers: Consumers, recorder: Recorders,
) -> None:
    # SPEC C1: dropped queues are committed first; new owners start from the committed offset
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 4)
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def listener_for(client: list[str]) -> Callable[[list[Message], Any], None]:
        def listener(messages: list[Message], ctx: Any) -> None:
            for m in messages:
                with lock:
                    seen.append((m.text, client[0]))
            time.sleep(0.002)
        return listener

    ids_a: list[str] = []
    a = consumers(group, topic, listener_for(ids_a))
    ids_a.append(a.client_id)
    stop = threading.Event()
    sent: list[str] = []

    def produce() -> None:
        n = 0
        while not stop.is_set():
            bodies = [f"m{n}-{i}" for i in range(10)]
            producer.send_batch(topic, [OutgoingMessage(b) for b in bodies])
            sent.extend(bodies)
            n += 1
            time.sleep(0.03)

    t = threading.Thread(target=produce)
    t.start()
    try:
        time.sleep(1.0)
        ids_b: list[str] = []
        b = consumers(group, topic, listener_for(ids_b))
        ids_b.append(b.client_id)

        def mine(c: PushConsumer) -> int:
            return len([q for q in c.owned_queues() if q.topic == topic])

        wait_until(lambda: mine(a) == 2 and mine(b) == 2, 20, what="4 queues over 2")
        time.sleep(2.0)
        a.shutdown()  # commits, then unregisters
        wait_until(lambda: mine(b) == 4, 20, what="b owns everything")
        time.sleep(1.0)
    finally:
        stop.set()
        t.join()
    wait_until(lambda: set(sent) <= {s for s, _ in seen}, 30, what="everything consumed")
    counts: dict[str, int] = defaultdict(int)
    for body, _ in seen:
        counts[body] += 1
    assert [b for b, n in counts.items() if n > 1] == []
    assert {c for _, c in seen} == {ids_a[0], ids_b[0]}


def test_subscription_mismatch_is_reported(
        stack: ClientStack, admin: AdminClient, names: Names, consumers: Consumers, cli: Cli,
) -> None:
    # SPEC C5
    t1, t2, group = names("t1"), names("t2"), names("g")
    admin.create_topic(t1, 2)
    admin.create_topic(t2, 2)
    a = consumers(group, t1, lambda ms, ctx: None)
    b = consumers(group, t1, lambda ms, ctx: None, start=False)
    b.subscribe(t2, "x || y")
    b.start()
    wait_until(lambda: not a.subscription_consistent and not b.subscription_consistent, 10,
               what="both consumers see the mismatch")
    assert any(m.get("clientId") in (a.client_id, b.client_id)
               for m in b.subscription_mismatches)
    result = cli("groups", "consumers", group)
    assert result.code == 0 and "subscribe differently (SPEC C5)" in result.out
    assert cli("--json", "groups", "consumers", group).json()["consistent"] is False


def test_average_by_circle_strategy_live(stack: ClientStack, admin: AdminClient, names: Names,
                                         consumers: Consumers) -> None:
    # SPEC C1: the strategy is the consumer's choice; ownership is disjoint and complete
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 5)
    cs = [consumers(group, topic, lambda ms, ctx: None, strategy=AverageByCircleStrategy())
          for _ in range(2)]

    def split() -> list[set[int]]:
        return [{q.queue_id for q in c.owned_queues() if q.topic == topic} for c in cs]

    wait_until(lambda: sorted(len(s) for s in split()) == [2, 3], 20, what="5 over 2")
    first, second = sorted(split(), key=min)
    assert first == {0, 2, 4} and second == {1, 3}
