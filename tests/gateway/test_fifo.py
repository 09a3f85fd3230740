"""FIFO (``message_group``; groups matching ``fifo-*`` in this suite's gateway settings):
every message of a group delivered in send order, one at a time per group, to a SimpleConsumer
and to a PushConsumer; a failure retries in place, then goes to ``%DLQ%<group>``
(DEC-gateway-fifo)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from rocketmq import Message

from tests.gateway.conftest import Gw, Recorder, message, receive_until
from tools.processes import wait_until

pytestmark = pytest.mark.gateway


def _send_groups(gw: Gw, topic: str, groups: int, each: int) -> dict[str, list[bytes]]:
    sent: dict[str, list[bytes]] = defaultdict(list)
    with gw.producer(topic) as producer:
        for i in range(each):
            for g in range(groups):
                body = f"g{g}-{i}".encode()
                producer.send(message(topic, body.decode(), message_group=f"g{g}"))
                sent[f"g{g}"].append(body)
    return sent


def _by_group(messages: list[Message]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = defaultdict(list)
    for m in messages:
        out[m.message_group].append(m.body)
    return out


def test_simple_consumer_gets_each_group_in_order_one_at_a_time(gw: Gw) -> None:
    topic, group = gw.topic(queues=2), gw.group("fifo")
    sent = _send_groups(gw, topic, groups=3, each=4)
    got: list[Message] = []
    with gw.simple(group, topic, await_s=1) as consumer:
        give_up = time.monotonic() + 30
        while len(got) < 12 and time.monotonic() < give_up:
            batch = consumer.receive(32, 10)
            more = consumer.receive(32, 10) if batch else []  # while the batch is held
            groups = [m.message_group for m in batch + more]
            assert len(groups) == len(set(groups))  # one message of a group under way
            for m in batch + more:
                consumer.ack(m)
            got += batch + more
    assert _by_group(got) == sent


def test_simple_consumer_failure_is_redelivered_in_place_before_the_next(gw: Gw) -> None:
    topic, group = gw.topic(queues=1), gw.group("fifo", retry_max_times=5)
    _send_groups(gw, topic, groups=1, each=2)
    with gw.simple(group, topic, await_s=1) as consumer:
        [first] = receive_until(consumer, 1, invisible_s=1, ack=False)
        [again] = receive_until(consumer, 1, invisible_s=10)
        [second] = receive_until(consumer, 1)
    assert (first.body, again.body, second.body) == (b"g0-0", b"g0-0", b"g0-1")
    assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)
    # in place: no copy went through %RETRY%
    assert gw.pull_all(topic) and not [m for m in gw.messages(first.message_id)
                                       if m["topic"].startswith("%RETRY%")]


def test_push_consumer_in_order_failure_retried_locally_then_dead_lettered(gw: Gw) -> None:
    topic, group = gw.topic(queues=2), gw.group("fifo", retry_max_times=2)
    sent = _send_groups(gw, topic, groups=3, each=4)
    recorder = Recorder(decide=lambda m: m.body != b"g1-1")  # always fails
    with gw.push(group, topic, recorder):
        wait_until(lambda: gw.dlq(group), 40, 0.2, what="g1-1 in the DLQ")
        wait_until(lambda: len(set(recorder.bodies())) >= 12, 30, 0.2,
                   what="every message consumed")
        time.sleep(1)
    # in send order per group; g1-1 attempted max attempts (3) times before g1-2
    firsts: dict[str, list[bytes]] = defaultdict(list)
    for body in recorder.bodies():
        group_name = body.decode().split("-")[0]
        if not firsts[group_name] or firsts[group_name][-1] != body:
            firsts[group_name].append(body)
    assert dict(firsts) == dict(sent)
    assert recorder.bodies().count(b"g1-1") == 3
    [dead] = gw.dlq(group)
    assert dead["body"] == "g1-1"
