"""Crashes under the official client: the gateway killed (SIGKILL) while a SimpleConsumer holds
messages (its state is in Redis: they come back after the invisible time, nothing lost), and
the store killed under a sending Producer (the client's retries and the gateway's wait for a
restarting store carry the sends; no acknowledged send is lost, SPEC P2)."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest

from tests.gateway.conftest import Gw, message, receive_until
from tools.processes import http_ok

pytestmark = pytest.mark.gateway


def test_gateway_killed_while_a_simple_consumer_holds_messages(gw: Gw) -> None:
    topic, group = gw.topic(queues=2), gw.group()
    with gw.producer(topic) as producer:
        sent = {producer.send(message(topic, f"held-{i}")).message_id for i in range(10)}
    with gw.simple(group, topic, await_s=1) as consumer:
        held = receive_until(consumer, 10, invisible_s=3, ack=False)
        assert {m.message_id for m in held} == sent
        gw.stack.gateway.kill()  # SIGKILL: no clean-up
        gw.stack.restart("gateway", stop=False)
        back = receive_until(consumer, 10, invisible_s=30, timeout_s=40, reconnecting=True)
    assert Counter(m.message_id for m in back) == Counter(sent)  # nothing lost, each once
    assert {m.delivery_attempt for m in back} == {2}


def test_store_killed_under_a_sending_producer_loses_no_acknowledged_send(gw: Gw) -> None:
    topic = gw.topic(queues=2)
    acked: list[str] = []
    refused: list[str] = []
    stop = threading.Event()
    with gw.producer(topic) as producer:
        def send_loop() -> None:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(producer.send(message(topic, f"s{i}")).message_id)
                except Exception as exc:  # not acknowledged (an error, a deadline)
                    refused.append(f"{type(exc).__name__}: {exc}")
                i += 1

        sender = threading.Thread(target=send_loop)
        sender.start()
        try:
            time.sleep(1.5)
            before_kill = len(acked)
            gw.stack.store.kill()
            time.sleep(0.3)
            gw.stack.restart("store", stop=False)
            time.sleep(2.5)
        finally:
            stop.set()
            sender.join(30)
    after = len(acked) - before_kill
    assert before_kill > 0 and after > 0  # sends went on after the restart
    assert http_ok(gw.stack.gateway.url + "/healthz")
    # every acknowledged send is stored (P2), once
    stored = Counter(m["msgId"] for m in gw.pull_all(topic))
    assert [i for i in acked if stored[i] == 0] == []
    metrics = gw.http_text(gw.stack.gateway.url + "/metrics")
    failed_answers = sum(float(count) for code, count in re.findall(
        r'^clepsydra_gateway_rpcs_total\{code="(\w+)",rpc="SendMessage"\} (\S+)$', metrics,
        flags=re.M) if code != "OK")
    # the client tried again after each error answer: fewer sends failed than answers did
    assert len(refused) <= failed_answers
    print(f"store kill: acked={len(acked)} refused={len(refused)} "
          f"gateway error answers={failed_answers:.0f}")
