"""The official SimpleConsumer and PushConsumer through the gateway: each message once,
redelivery after the invisible time through ``%RETRY%<group>`` (reconsumeTimes counted), the
DLQ after the group's max attempts (SPEC R5-R8), progress committed to the store (C4), and the
project's SDK in the same group."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from clepsydra_client.consumer.push import PushConsumer as SdkPushConsumer
from clepsydra_client.producer import Producer as SdkProducer
from tests.gateway.conftest import Gw, Recorder, message, receive_until
from tools.processes import wait_until

pytestmark = pytest.mark.gateway


def test_receive_then_ack_each_message_once_and_progress_is_committed(gw: Gw) -> None:
    topic, group = gw.topic(queues=3), gw.group()
    with gw.producer(topic) as producer:
        sent = {producer.send(message(topic, f"m{i}")).message_id for i in range(12)}
    with gw.simple(group, topic) as consumer:
        got = receive_until(consumer, 12, timeout_s=20)
        assert consumer.receive(32, 10) == []  # nothing more: each once
    assert Counter(m.message_id for m in got) == Counter(sent)
    assert all(m.delivery_attempt == 1 for m in got)
    # C4: the group's progress reaches the store (flushed every 0.5 s), past every acked one
    assert wait_until(lambda: gw.committed(group, topic) == 12, 30, 0.2, what="progress committed")


def test_not_acked_comes_back_through_retry_with_attempt_plus_one(gw: Gw) -> None:
    topic, group = gw.topic(queues=1), gw.group()
    with gw.producer(topic) as producer:
        msg_id = producer.send(message(topic, "flaky", tag="t1")).message_id
    with gw.simple(group, topic) as consumer:
        [first] = receive_until(consumer, 1, invisible_s=1, ack=False)
        handed_at = time.monotonic()
        [again] = receive_until(consumer, 1, invisible_s=10, ack=False)
        assert time.monotonic() - handed_at >= 1.0  # not before the invisible time
        assert (again.message_id, again.body, again.topic, again.tag) == (
            msg_id, b"flaky", topic, "t1")
        assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)
        consumer.ack(again)
    # the retry is Clepsydra's: a copy in %RETRY%<group> with reconsumeTimes 1
    copies = gw.messages(msg_id)
    retried = [c for c in copies if c["topic"] == f"%RETRY%{group}"]
    assert retried and retried[-1]["reconsumeTimes"] == 1
    assert retried[-1]["properties"]["RETRY_TOPIC"] == topic


def test_change_invisible_duration_moves_the_time(gw: Gw) -> None:
    topic, group = gw.topic(queues=1), gw.group()
    with gw.producer(topic) as producer:
        producer.send(message(topic, "slow"))
    with gw.simple(group, topic, await_s=1) as consumer:
        [m] = receive_until(consumer, 1, invisible_s=1, ack=False)
        consumer.change_invisible_duration(m, 4)
        time.sleep(2.5)  # past the first invisible time (and its retry level), within the new
        assert consumer.receive(32, 10) == []
        consumer.ack(m)  # the new handle acks
        time.sleep(3)
        assert consumer.receive(32, 10) == []  # acked: never back


def test_after_the_groups_max_attempts_it_is_in_the_dlq(gw: Gw) -> None:
    # SPEC R5, R6: retryMaxTimes 1 -> two attempts, then %DLQ%<group>
    topic, group = gw.topic(queues=1), gw.group(retry_max_times=1)
    with gw.producer(topic) as producer:
        msg_id = producer.send(message(topic, "doomed")).message_id
    with gw.simple(group, topic, await_s=1) as consumer:
        attempts = [m.delivery_attempt for m in receive_until(consumer, 2, invisible_s=1,
                                                              ack=False, timeout_s=20)]
        assert attempts == [1, 2]
        dead = wait_until(lambda: gw.dlq(group), 30, 0.2, what="a dead letter")
        assert consumer.receive(32, 10) == []
    assert [d["msgId"] for d in dead] == [msg_id]


def test_push_consumer_failing_listener_backs_off_then_dead_letters(gw: Gw) -> None:
    # the Settings the gateway sends: max attempts = retryMaxTimes + 1, back-off = the ladder
    topic, group = gw.topic(queues=2), gw.group(retry_max_times=2)
    recorder = Recorder(decide=lambda m: m.body != b"bad")
    with gw.producer(topic) as producer:
        bad = producer.send(message(topic, "bad")).message_id
        good = producer.send(message(topic, "good")).message_id
    with gw.push(group, topic, recorder):
        wait_until(lambda: gw.dlq(group), 40, 0.2, what="the failing message in the DLQ")
        time.sleep(1)
    calls = [(t, m) for t, m in recorder.calls if m.message_id == bad]
    assert [m.delivery_attempt for _t, m in calls] == [1, 2, 3]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(calls)]
    assert all(gap >= 1.0 for gap in gaps)  # the 1 s back-off of the all-1s ladder, R7
    assert [m.message_id for _t, m in recorder.calls if m.body == b"good"] == [good]
    assert [d["msgId"] for d in gw.dlq(group)] == [bad]


def test_push_consumer_that_succeeds_consumes_each_message_once(gw: Gw) -> None:
    topic, group = gw.topic(queues=4), gw.group()
    recorder = Recorder()
    with gw.producer(topic) as producer:
        sent = [producer.send(message(topic, f"p{i}")).message_id for i in range(20)]
        with gw.push(group, topic, recorder):
            wait_until(lambda: len(recorder.calls) >= 20, 30, 0.2, what="20 messages consumed")
            time.sleep(2)
    assert Counter(m.message_id for _t, m in recorder.calls) == Counter(sent)


def test_the_sdk_and_the_official_client_share_a_groups_progress(gw: Gw) -> None:
    topic, group = gw.topic(queues=1), gw.group()
    sdk = SdkProducer(gw.stack.store.url)
    try:
        from_sdk = sdk.send(topic, "from the SDK").msg_id
    finally:
        sdk.close()
    with gw.simple(group, topic) as consumer:  # the official SimpleConsumer receives it
        [got] = receive_until(consumer, 1)
    assert got.message_id == from_sdk and got.body == b"from the SDK"
    wait_until(lambda: gw.committed(group, topic) == 1, 30, 0.2,
               what="the ack committed to the store")
    with gw.producer(topic) as producer:
        from_official = producer.send(message(topic, "from RocketMQ")).message_id
    seen: list[str] = []

    def listener(messages: list, _context: object) -> None:  # type: ignore[type-arg]
        seen.extend(m.msg_id for m in messages)

    consumer = SdkPushConsumer(group, gw.stack.store.url, gw.stack.retry.url,
                               heartbeat_interval_s=0.3, persist_interval_s=0.3)
    consumer.subscribe(topic)
    consumer.register_concurrent(listener)
    consumer.start()
    try:
        wait_until(lambda: seen, 30, 0.2, what="the SDK consumer's first message")
        time.sleep(1)
    finally:
        consumer.shutdown()
    assert seen == [from_official]  # the group's progress is one: not the SDK's message again


def test_settings_carry_the_groups_retry_policy(gw: Gw) -> None:
    # Telemetry: a consumer's Settings answered with max attempts = retryMaxTimes + 1 (R5),
    # the back-off = the retry ladder of the level table (R7: all 1 s here), the FIFO flag,
    # metrics off; a producer's with the largest body (P1)
    group, fifo = gw.group(retry_max_times=3), gw.group("fifo", retry_max_times=5)
    stub = gw.stub()
    for name, attempts, is_fifo in ((group, 4, False), (fifo, 6, True)):
        theirs = d.Settings(client_type=d.ClientType.PUSH_CONSUMER,
                            subscription=d.Subscription(group=d.Resource(name=name)),
                            metric=d.Metric(on=True))
        [answer] = list(stub.Telemetry(iter([s.TelemetryCommand(settings=theirs)]), timeout=10))
        assert answer.status.code == d.Code.OK
        ours = answer.settings
        assert ours.backoff_policy.max_attempts == attempts
        assert [x.seconds for x in ours.backoff_policy.customized_backoff.next] == [1] * (
            attempts - 1)
        assert ours.subscription.fifo is is_fifo and not ours.metric.on
    producer = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
    [answer] = list(stub.Telemetry(iter([s.TelemetryCommand(settings=producer)]), timeout=10))
    assert answer.settings.publishing.max_body_size == 4 * 1024 * 1024
