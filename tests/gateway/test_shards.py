"""The gateway in front of three store shards (DEC-store-shards) with the official client: sends
spread over every shard's queues (a FIFO message group hashed over all of them), a consumer
receives every message of every shard once and its progress is committed on each queue's
shard, a message not acked comes back through the retry service on its own shard, recalls and
changes of invisible time of any shard's message, and one shard killed: sends go on, the
others' messages are received, nothing acknowledged is lost."""

from __future__ import annotations

import hashlib
import time
from collections import Counter

import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from clepsydra_client.producer import Producer as SdkProducer
from clepsydra_core import properties as P
from clepsydra_gateway.backend import Backend
from tests.gateway.conftest import SHARDS, Gw, Gw3, message, receive_until
from tools.processes import wait_until

pytestmark = pytest.mark.gateway


def _shard_of(gw3: Gw3, msg_id: str, topic: str) -> int:
    """The shard that stored ``msg_id`` in ``topic`` (GET /v1/messages/{msgId}: any shard
    answers for all, each copy with its shard)."""
    copies = [c for c in gw3.messages(msg_id) if c["topic"] == topic]
    assert len(copies) == 1, copies
    return int(copies[0].get("shard") or 0)


def test_sends_land_on_every_shard_and_the_route_lists_every_queue(gw3: Gw3) -> None:
    topic = gw3.topic(queues=2)
    stub = gw3.stub()
    route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), timeout=10)
    assert route.status.code == d.Code.OK
    assert sorted(q.id for q in route.message_queues) == list(range(2 * SHARDS))
    with gw3.producer(topic) as producer:
        sent = [producer.send(message(topic, f"m{i}")).message_id for i in range(30)]
    counts = gw3.shard_counts(topic)
    assert sum(counts) == 30 and all(c > 0 for c in counts), counts  # every shard, each once
    assert sorted(Counter(m["msgId"] for m in gw3.pull_all_shards(topic)).items()) == sorted(
        Counter(sent).items())


def test_a_message_group_hashes_over_every_shards_queues(gw3: Gw3) -> None:
    # the official client's hash (SHA-256 modulo the queues) over the global list: shard by
    # shard, then queue id - 2 queues on 3 shards are indexes 0..5
    topic = gw3.topic(queues=2)
    places = [(shard, q) for shard in range(SHARDS) for q in range(2)]
    groups = [f"order-{i}" for i in range(12)]
    with gw3.producer(topic) as producer:
        for group in groups:
            for n in range(2):
                producer.send(message(topic, f"{group}:{n}", message_group=group))
    for group in groups:
        index = int.from_bytes(hashlib.sha256(group.encode()).digest(), "big") % len(places)
        shard, queue_id = places[index]
        http = gw3.shard(shard)
        page = http.get(http.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
                        {"offset": 0, "max": 100})
        bodies = [m["body"] for m in page["messages"]
                  if m["properties"].get(P.SHARDING_KEY) == group]
        assert bodies == [f"{group}:0", f"{group}:1"], (group, shard, queue_id)
    assert all(c > 0 for c in gw3.shard_counts(topic))


def test_a_consumer_receives_every_message_of_every_shard_once_and_commits_on_each(
        gw3: Gw3) -> None:
    # C4 on each queue's shard; messages of the SDK's producer (spread over the shards by the
    # SDK's own routing) and of the official one
    topic, group = gw3.topic(queues=2), gw3.group()
    sdk = SdkProducer(gw3.stack.store.url)
    try:
        sent = [sdk.send(topic, f"sdk{i}").msg_id for i in range(24)]
    finally:
        sdk.close()
    with gw3.producer(topic) as producer:
        sent += [producer.send(message(topic, f"rmq{i}")).message_id for i in range(12)]
    counts = gw3.shard_counts(topic)
    assert all(c > 0 for c in counts), counts
    with gw3.simple(group, topic) as consumer:
        got = receive_until(consumer, len(sent), timeout_s=40)
        assert consumer.receive(32, 10) == []  # nothing more: each once
    assert Counter(m.message_id for m in got) == Counter(sent)
    handles = {m.receipt_handle[:4] for m in got}
    assert handles == {"cg1.", "cg2."}  # shard 0's in today's format, the others' with it
    wait_until(lambda: [gw3.committed_on(group, topic, i) for i in range(SHARDS)] == counts,
               30, 0.2, what="progress committed on every shard")


def test_a_message_not_acked_comes_back_through_retry_on_its_shard(gw3: Gw3) -> None:
    # SPEC R1, R4: the %RETRY% copy is written on the shard that holds the message, and its
    # redelivery (a handle of that shard) acks there
    topic, group = gw3.topic(queues=1), gw3.group()
    on_shard_2 = gw3.produce_on(2, topic, "flaky on 2")
    with gw3.simple(group, topic) as consumer:
        [first] = receive_until(consumer, 1, invisible_s=1, ack=False)
        assert first.message_id == on_shard_2 and first.receipt_handle.startswith("cg2.")
        [again] = receive_until(consumer, 1, invisible_s=10, ack=False, timeout_s=20)
        assert (again.message_id, again.body, again.topic) == (on_shard_2, b"flaky on 2",
                                                               topic)
        assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)
        consumer.change_invisible_duration(again, 10)  # a shard 2 delivery's new handle...
        time.sleep(0.5)
        consumer.ack(again)  # ...acks
        assert consumer.receive(32, 10) == []
    retried = [c for c in gw3.messages(on_shard_2) if c["topic"] == f"%RETRY%{group}"]
    assert [(c.get("shard"), c["reconsumeTimes"]) for c in retried] == [(2, 1)]
    wait_until(lambda: gw3.committed_on(group, f"%RETRY%{group}", 2) == 1,
               30, 0.2, what="the retry copy's ack committed on shard 2")


def test_a_scheduled_message_of_any_shard_is_recalled(gw3: Gw3) -> None:
    # SPEC T1: the recall handle names the message's shard; its cancel goes there
    topic, group = gw3.topic(queues=1), gw3.group()
    deliver_s = int(time.time()) + 4
    with gw3.producer(topic) as producer:
        receipts = [producer.send(message(topic, f"later{i}", delivery_timestamp=deliver_s))
                    for i in range(9)]
        shards = {_shard_of_any(gw3, r.message_id) for r in receipts}
        assert shards == {0, 1, 2}
        for receipt in receipts:
            producer.recall_message(topic, receipt.recall_handle)
    assert {r.recall_handle[:4] for r in receipts} == {"cr1.", "cr2."}
    with gw3.simple(group, topic, await_s=2) as consumer:
        time.sleep(max(0.0, deliver_s - time.time()) + 1.5)
        assert consumer.receive(32, 10) == []  # none delivered: every one was recalled


def _shard_of_any(gw3: Gw3, msg_id: str) -> int:
    return int(gw3.messages(msg_id)[0].get("shard") or 0)


def test_one_shard_killed_sends_go_on_and_nothing_acknowledged_is_lost(gw3: Gw3) -> None:
    topic, group = gw3.topic(queues=2), gw3.group()
    with gw3.producer(topic) as producer:
        before = [producer.send(message(topic, f"b{i}")).message_id for i in range(15)]
        on_2 = [i for i in before if _shard_of(gw3, i, topic) == 2]
        assert on_2
        gw3.stack.by_name[gw3.shard_name(2)].kill()
        try:
            # every send is acknowledged: one shard 2 could not take goes to another
            after = [producer.send(message(topic, f"a{i}")).message_id for i in range(15)]
            assert len(after) == 15
            with gw3.simple(group, topic) as consumer:
                # the other shards' messages come while shard 2 is down
                want = len(before) - len(on_2) + len(after)
                got = receive_until(consumer, want, timeout_s=40)
                assert Counter(m.message_id for m in got) == Counter(
                    [i for i in before if i not in on_2] + after)
        finally:
            gw3.stack.restart(gw3.shard_name(2), stop=False)
    with gw3.simple(group, topic) as consumer:
        # shard 2 back: its acknowledged messages are delivered, each once
        back = receive_until(consumer, len(on_2), timeout_s=40)
        assert consumer.receive(32, 10) == []
    assert Counter(m.message_id for m in back) == Counter(on_2)


def test_after_max_attempts_the_dead_letter_is_on_the_messages_shard(gw3: Gw3) -> None:
    # SPEC R5, R6: retryMaxTimes 1 -> two attempts, then %DLQ%<group> on the shard that holds
    # the message; the retry service's DLQ list (every shard) names that shard
    topic, group = gw3.topic(queues=1), gw3.group(retry_max_times=1)
    on_shard_1 = gw3.produce_on(1, topic, "doomed on 1")
    with gw3.simple(group, topic, await_s=1) as consumer:
        attempts = [m.delivery_attempt for m in receive_until(consumer, 2, invisible_s=1,
                                                              ack=False, timeout_s=20)]
        assert attempts == [1, 2]
        dead = wait_until(lambda: gw3.dlq(group), 30, 0.2, what="a dead letter")
    assert [(m["msgId"], m.get("shard")) for m in dead] == [(on_shard_1, 1)]
    copies = [c for c in gw3.messages(on_shard_1) if c["topic"] == f"%DLQ%{group}"]
    assert [c.get("shard") for c in copies] == [1]


def test_one_store_is_called_as_before_shards_and_a_cluster_is_routed(gw: Gw, gw3: Gw3) -> None:
    # the gateway's store calls (clepsydra_gateway.backend) against a real one-store stack and
    # the three shards: one store never builds the SDK's routing (no /v1/cluster or
    # /v1/routes call, the store's own topic answer), a cluster's first answer turns it on
    for stack, shards in ((gw, 1), (gw3, SHARDS)):
        backend = Backend(stack.stack.store.url, stack.stack.retry.url, timeout_s=10,
                          refused_retry_s=1)
        try:
            topic = stack.topic(queues=2)
            info = backend.topic(topic, None)
            assert info is not None
            assert info.places == tuple((s, q) for s in range(shards) for q in range(2))
            answer, stored_on = backend.produce(topic, {"body": "x"}, None)
            assert stored_on in range(shards) and answer["msgId"]
            if shards == 1:
                assert backend.router() is None and backend._router is None
                assert backend.place(topic, 1, None) == (0, 1)
            else:
                assert backend.router() is not None
                assert backend.place(topic, 5, None) == (2, 1)
        finally:
            backend.close()
