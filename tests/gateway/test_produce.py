"""The official Producer through the gateway: a normal message is a Clepsydra message
(its msgId, tags, keys, properties seen by the store, the SDK and the CLI), a scheduled one is
a timer (SPEC T1) delivered at its time and recalled by the store's cancel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rocketmq.v5.exception import BadRequestException, NotFoundException

from clepsydra_client.consumer.pull_consumer import PullConsumer
from tests.gateway.conftest import Gw, message, receive_until

pytestmark = pytest.mark.gateway


def test_a_sent_message_is_a_clepsydra_message_with_its_msg_id(gw: Gw) -> None:
    topic = gw.topic()
    with gw.producer(topic) as producer:
        receipt = producer.send(message(topic, "charge 42", tag="pay", keys="order-42",
                                        properties={"region": "eu"}))
    # the answer's message id is the message's msgId: GET /v1/messages/{msgId} finds it
    [stored] = gw.messages(receipt.message_id)
    assert stored["msgId"] == receipt.message_id
    assert (stored["topic"], stored["body"], stored["tags"], stored["keys"]) == (
        topic, "charge 42", "pay", "order-42")
    assert stored["properties"]["region"] == "eu"
    # ... and so does the project's CLI, and its SDK's pull consumer
    cli = subprocess.run([str(Path(sys.executable).parent / "clepsydra"), "--json", "message",
                          "show", receipt.message_id], capture_output=True, text=True,
                         env={**os.environ, "CLEPSYDRA_STORE_URL": gw.stack.store.url},
                         timeout=60, check=True)
    assert receipt.message_id in cli.stdout and "charge 42" in cli.stdout
    consumer = PullConsumer("sdk-reader", gw.stack.store.url)
    seen = [m for q in consumer.queues(topic) for m in consumer.pull(q, 0, 10).messages]
    assert [m.msg_id for m in seen] == [receipt.message_id]


def test_a_scheduled_message_is_delivered_at_its_time_never_before(gw: Gw) -> None:
    # SPEC T1: delivery_timestamp (whole epoch seconds, as the client sends it) -> deliverAt
    topic, group = gw.topic(), gw.group()
    deliver_s = int(time.time()) + 3
    with gw.producer(topic) as producer:
        receipt = producer.send(message(topic, "later", delivery_timestamp=deliver_s))
        assert receipt.recall_handle  # a scheduled message can be recalled
    with gw.simple(group, topic, await_s=2) as consumer:
        [got] = receive_until(consumer, 1, timeout_s=20)
        arrived_ms = time.time() * 1000
    assert got.message_id == receipt.message_id and got.body == b"later"
    assert arrived_ms >= deliver_s * 1000  # never early
    assert got.delivery_timestamp == deliver_s * 1000
    copies = gw.messages(receipt.message_id)
    assert any(c["topic"] != topic for c in copies)  # it was parked before its time


def test_a_time_past_the_delay_limit_is_refused_with_illegal_delivery_time(gw: Gw) -> None:
    topic = gw.topic()
    before = gw.max_offset(topic)
    with gw.producer(topic) as producer, pytest.raises(BadRequestException) as caught:
        producer.send(message(topic, "too late", delivery_timestamp=int(time.time())
                              + 400 * 86_400))
    assert caught.value.code == 40012  # Code.ILLEGAL_DELIVERY_TIME
    assert "CLEPSYDRA_TIMER_MAX_DELAY" in str(caught.value)
    assert gw.max_offset(topic) == before  # nothing written


def test_recall_before_the_time_cancels_after_it_is_not_found(gw: Gw) -> None:
    topic, group = gw.topic(), gw.group()
    with gw.producer(topic) as producer:
        early = producer.send(message(topic, "recalled", delivery_timestamp=int(time.time())
                                      + 2))
        kept = producer.send(message(topic, "kept", delivery_timestamp=int(time.time()) + 2))
        assert producer.recall_message(topic, early.recall_handle) == early.message_id
        with gw.simple(group, topic, await_s=2) as consumer:
            got = receive_until(consumer, 2, timeout_s=8)
        # the recalled one never comes (Clepsydra's cancel); the other does
        assert [m.body for m in got] == [b"kept"]
        with pytest.raises(NotFoundException) as caught:
            producer.recall_message(topic, kept.recall_handle)  # already delivered
        assert caught.value.code == 40400
        assert "already delivered" in str(caught.value)
    history = json.dumps(gw.messages(early.message_id))
    assert early.message_id in history
