"""A push consumer's pull loop uses the store's pull hold (DEC-pull-hold), against a real store
process: an idle consumer's pulls are held in the store (its ``held_pulls`` gauge), a message
produced then is consumed, and the consumer's shutdown does not wait for a held pull."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests

from clepsydra_client import AdminClient, Producer, PushConsumer
from clepsydra_client.consumer.listener import ConsumeFromWhere, ConsumeResult
from clepsydra_core.wire.messages import MAX_PULL_WAIT_MS
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration

TOPIC, GROUP = "held", "held-group"


def held_pulls(store: HttpService) -> float:
    for line in requests.get(f"{store.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("clepsydra_store_engine_held_pulls "):
            return float(line.split()[1])
    raise AssertionError("no clepsydra_store_engine_held_pulls gauge")


def test_a_consumer_waits_in_held_pulls_and_stops_without_waiting_for_them(
        start_store: Callable[..., HttpService]) -> None:
    store = start_store()
    AdminClient(store.url, None).create_topic(TOPIC, 2)
    seen: list[str] = []
    got = threading.Event()

    def listener(messages: list[Any], _context: Any) -> ConsumeResult:
        seen.extend(m.text for m in messages)
        got.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(GROUP, store.url, consume_from_where=ConsumeFromWhere.FIRST,
                            pull_hold_ms=MAX_PULL_WAIT_MS)
    consumer.subscribe(TOPIC).register_concurrent(listener)
    consumer.start()
    try:
        wait_until(lambda: held_pulls(store) == 2, 20, what="both queues' pulls held")
        with Producer(store.url) as producer:
            producer.send(TOPIC, "hello", queue_id=1)
        assert got.wait(20) and seen == ["hello"]
        wait_until(lambda: held_pulls(store) == 2, 20, what="held again")
    finally:
        consumer.shutdown()
    # the shutdown returned while the store still holds its pulls (their wait is 30 s)
    assert held_pulls(store) == 2
