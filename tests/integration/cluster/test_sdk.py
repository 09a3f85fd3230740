"""The SDK over three store shards through one address (DEC-store-shards,
DEC-shard-send-retry): plain sends spread over every shard, a dead or full shard costs a
producer a retry and not an error, a group consumes every shard's queues once, keyed sends keep
their queue, orderly consumers lock each queue on its own shard, and send-backs, retries and
dead letters stay on the shard that stored the message."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clepsydra_client import AdminClient, ConsumeResult, Producer, PushConsumer
from clepsydra_client.consumer.listener import OrderlyResult
from clepsydra_client.message import Message, MessageQueue
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError
from tests.integration.cluster.conftest import SHARDS, TOPIC, Cluster
from tools.processes import wait_until

pytestmark = pytest.mark.integration

FAST = {"heartbeat_interval_s": 0.5, "persist_interval_s": 0.5, "pull_hold_ms": 200}


class Seen:
    """What a listener was given, by msgId, with the shard each copy came from."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: Counter[str] = Counter()
        self.shards: dict[str, int] = {}
        self.by_queue: dict[MessageQueue, list[str]] = {}

    def add(self, messages: list[Message]) -> None:
        with self.lock:
            for m in messages:
                self.bodies[m.text] += 1
                self.shards[m.text] = m.shard
                self.by_queue.setdefault(m.queue, []).append(m.text)

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)


@pytest.fixture
def consumers(cluster_with_retry: Cluster) -> Iterator[Callable[..., PushConsumer]]:
    started: list[PushConsumer] = []

    def start(group: str, listener: Callable[..., Any], *, orderly: bool = False,
              **kw: Any) -> PushConsumer:
        c = PushConsumer(group, cluster_with_retry.url,
                         cluster_with_retry.stack.retry.url, **{**FAST, **kw})
        c.subscribe(TOPIC)
        if orderly:
            c.register_orderly(listener)
        else:
            c.register_concurrent(listener)
        started.append(c.start())
        return c

    yield start
    for c in started:
        c.shutdown()


@pytest.fixture
def cluster_with_retry(make_cluster: Callable[..., Cluster]) -> Cluster:
    cluster = make_cluster(retry=True, scheduler=True)
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 2}).raise_for_status()
    return cluster


def _shards(results: list[Any]) -> Counter[int]:
    return Counter(r.offset_msg_id and int(r.offset_msg_id[8:12], 16) for r in results)


def test_sends_spread_over_every_shard_and_a_group_consumes_each_once(
        cluster_with_retry: Cluster, consumers: Callable[..., PushConsumer]) -> None:
    cluster = cluster_with_retry
    seen = Seen()

    def listener(messages: list[Message], _ctx: Any) -> ConsumeResult:
        seen.add(messages)
        return ConsumeResult.SUCCESS

    first = consumers("g", listener)
    second = consumers("g", listener)
    expected = sorted([MessageQueue(TOPIC, q, s) for s in range(SHARDS) for q in range(2)]
                      + [MessageQueue(naming.retry_topic("g"), 0, s) for s in range(SHARDS)])
    wait_until(lambda: sorted(first.owned_queues() + second.owned_queues()) == expected
               and first.owned_queues() and second.owned_queues(), 30,
               what="the two consumers to share every shard's queues")
    time.sleep(2.5)  # their hand-over grace (C1): the queues that moved are being pulled
    with Producer(cluster.url) as producer:
        single = [producer.send(TOPIC, f"s{i}") for i in range(30)]
        futures = [producer.send_async(TOPIC, f"a{i}") for i in range(300)]
        producer.flush()
        batches = [producer.send_batch(TOPIC, [_message(f"b{j}-{i}") for i in range(20)])
                   for j in range(6)]
    stored = single + [f.result() for f in futures] + [r for b in batches for r in b]
    # the first send goes to the address given, before its answer named the cluster; after
    # that every shard takes its turn
    assert set(_shards(single)) == {0, 1, 2} and min(_shards(single).values()) >= 9
    assert set(_shards(stored)) == {0, 1, 2}
    wait_until(lambda: seen.count() == len(stored), 60, what="every message consumed")
    time.sleep(1.5)
    assert set(seen.bodies.values()) == {1}  # each once
    owned = sorted(first.owned_queues() + second.owned_queues())
    assert owned == expected  # every shard's queues, each owned once (C1)
    with AdminClient(cluster.url) as admin:
        wait_until(lambda: sum(admin.offsets("g", TOPIC).values()) == len(stored), 20,
                   what="offsets committed on every shard")
        offsets = admin.offsets("g", TOPIC)
    assert {q.shard for q in offsets} == {0, 1, 2}


def _message(body: str) -> Any:
    from clepsydra_client import OutgoingMessage

    return OutgoingMessage(body)


def test_a_killed_shard_costs_a_producer_one_retry_not_an_error(
        cluster_with_retry: Cluster, consumers: Callable[..., PushConsumer]) -> None:
    cluster = cluster_with_retry
    seen = Seen()
    consumers("g", lambda ms, _c: (seen.add(ms), ConsumeResult.SUCCESS)[1])
    with Producer(cluster.url) as producer:
        before = [producer.send(TOPIC, f"before{i}") for i in range(12)]
        cluster.kill(1)
        after, lost = [], []
        for i in range(30):
            try:
                after.append(producer.send(TOPIC, f"after{i}"))
            except ClepsydraError as exc:  # written to shard 1's kept-alive connection as it
                lost.append(exc)  # died: the answer lost, maybe stored, so never resent
        # DEC-shard-send-retry: at most the send racing the kill fails; every later one goes
        # to another shard, a retry and not an error
        assert len(lost) <= 1 and all(e.code == "SERVICE_UNAVAILABLE" for e in lost)
        assert len(after) >= 29 and 1 not in _shards(after)
        with Producer(cluster.url) as fresh:  # a producer that starts while it is down
            late = [fresh.send(TOPIC, f"late{i}") for i in range(9)]
        assert set(_shards(late)) == {0, 2}
    with AdminClient(cluster.url) as admin:
        bodies = {r.uniq_key: admin.message(r.offset_msg_id).text
                  for r in before + after + late if _shards([r]) != Counter({1: 1})}
    bodies.update({r.uniq_key: f"before{i}" for i, r in enumerate(before)})
    on_dead = {bodies[r.uniq_key] for r in before if _shards([r]) == Counter({1: 1})}
    assert on_dead  # some acknowledged messages wait on the dead shard
    elsewhere = set(bodies.values()) - on_dead
    wait_until(lambda: elsewhere <= set(seen.bodies), 40,
               what="the other shards' messages consumed while shard 1 is down")
    cluster.restart(1)
    wait_until(lambda: set(bodies.values()) <= set(seen.bodies), 60,
               what="the dead shard's messages consumed after its restart")
    time.sleep(1)
    assert set(seen.bodies.values()) == {1}


def test_a_full_shard_sends_producers_to_the_others(cluster_with_retry: Cluster) -> None:
    cluster = cluster_with_retry
    cluster.restart(2, stop=True, CLEPSYDRA_STORE_DISK_CAPACITY_BYTES="4096",
                    CLEPSYDRA_STORE_DISK_MAX_RATIO="0.01", CLEPSYDRA_STORE_DISK_WARN_RATIO="0.01")
    wait_until(lambda: cluster.post(2, f"/v1/topics/{TOPIC}/messages",
                                    {"body": "x"}).status_code == 507, 30, what="shard 2 full")
    with Producer(cluster.url) as producer:
        sent = [producer.send(TOPIC, f"m{i}") for i in range(24)]
        futures = [producer.send_async(TOPIC, f"a{i}") for i in range(50)]
        producer.flush()
        sent += [f.result() for f in futures]
    assert 2 not in _shards(sent) and set(_shards(sent)) == {0, 1}


def test_a_hash_key_keeps_its_queue_and_orderly_consumers_lock_each_queue_on_its_shard(
        cluster_with_retry: Cluster, consumers: Callable[..., PushConsumer]) -> None:
    cluster = cluster_with_retry
    seen = Seen()

    def orderly(messages: list[Message], _ctx: Any) -> OrderlyResult:
        seen.add(messages)
        return OrderlyResult.SUCCESS

    consumers("o", orderly, orderly=True)
    with Producer(cluster.url) as producer:
        for i in range(40):
            producer.send(TOPIC, f"k{i % 4}:{i}", hash_key=f"k{i % 4}")
    wait_until(lambda: seen.count() == 40, 60, what="every keyed message consumed")
    by_key: dict[str, set[MessageQueue]] = {}
    for queue, bodies in seen.by_queue.items():
        for body in bodies:
            by_key.setdefault(body.split(":")[0], set()).add(queue)
        numbers = [int(b.split(":")[1]) for b in bodies]
        assert numbers == sorted(numbers)  # in order within each queue (R12)
    assert all(len(queues) == 1 for queues in by_key.values())  # one queue per key

    def locked() -> list[tuple[int, int]]:
        held = [(shard, lock["topic"], lock["queueId"]) for shard in range(SHARDS)
                for lock in cluster.get(shard, "/v1/groups/o/locks").json()["locks"]]
        return sorted((s, q) for s, t, q in held if t == TOPIC)

    # a queue that got no keyed message may be locked after the last message was consumed
    # (its claim's lock tried again after a call that failed, or taken at a later rebalance):
    # it must be locked within a few rebalances (heartbeat 0.5 s), not by then
    every = [(s, q) for s in range(SHARDS) for q in range(2)]
    wait_until(lambda: locked() == every, 30, what="every queue locked on its shard")
    assert locked() == every


def test_retries_and_dead_letters_stay_on_the_shard_that_stored_the_message(
        cluster_with_retry: Cluster, consumers: Callable[..., PushConsumer]) -> None:
    cluster = cluster_with_retry
    attempts: Counter[str] = Counter()
    shards: dict[str, set[int]] = {}
    lock = threading.Lock()

    def failing(messages: list[Message], _ctx: Any) -> ConsumeResult:
        with lock:
            for m in messages:
                attempts[m.text] += 1
                shards.setdefault(m.text, set()).add(m.shard)
        return ConsumeResult.RECONSUME_LATER

    cluster.http.put(cluster.stack.retry.url + "/v1/groups/f",
                     json={"retryMaxTimes": 1}, timeout=10).raise_for_status()
    consumers("f", failing)
    with Producer(cluster.url) as producer:
        sent = {f"m{i}": producer.send(TOPIC, f"m{i}") for i in range(9)}
    assert set(_shards(list(sent.values()))) == {0, 1, 2}
    # every message: the first attempt, one retry (level 3 + 0, clamped: 3 s), then the DLQ
    wait_until(lambda: sum(attempts.values()) == 18, 60, what="a retry of every message")
    for body, result in sent.items():
        assert shards[body] == {_shards([result]).most_common(1)[0][0]}  # never moved
    with AdminClient(cluster.url, cluster.stack.retry.url) as admin:
        wait_until(lambda: len(list(admin.dlq_messages("f"))) == 9, 30, what="9 dead letters")
        dead = list(admin.dlq_messages("f", page_size=2))  # pages cross the shards
        assert sorted(m.text for m in dead) == sorted(sent)
        for m in dead:
            assert m.shard == _shards([sent[m.text]]).most_common(1)[0][0]
        resent = admin.dlq_resend("f", [dead[0].msg_id, dead[4].msg_id])
        assert resent.resent == 2
        assert admin.dlq_purge("f", all_messages=True) == 7
        assert list(admin.dlq_messages("f")) == []
    for shard in range(SHARDS):
        dlq = cluster.get(shard, f"/v1/topics/{naming.dlq_topic('f')}")
        held = [m for m in dead if m.shard == shard]
        assert dlq.json()["queues"][0]["maxOffset"] == len(held)


def test_a_producer_sends_nothing_twice_when_refused(cluster_with_retry: Cluster) -> None:
    cluster = cluster_with_retry
    for shard in range(SHARDS):
        cluster.post(0, f"/v1/cluster/shards/{shard}/drain").raise_for_status()
    with Producer(cluster.url) as producer, pytest.raises(ClepsydraError) as info:
        for _ in range(3):
            producer.send(TOPIC, "nowhere")
    assert info.value.code == "NO_PERMISSION"
    for shard in range(SHARDS):
        queues = cluster.get(shard, f"/v1/topics/{TOPIC}").json()["queues"]
        assert sum(q["maxOffset"] for q in queues) == 0
