"""A store shard added under running clients (DEC-store-shards "Growing and shrinking",
DEC-route-refresh): a cluster of two shards grows to three (the new shard started, then each old
one restarted with the larger ``CLEPSYDRA_STORE_SHARDS``, shard 0 last: ``grow``), and

- the SDK's routing reads the new membership at the first answer that names three shards, not
  only when its refresh period (``CLEPSYDRA_CLIENT_ROUTE_REFRESH_S``, 30 s) comes round: a
  router whose clock never moves still sends to the new shard;
- a running Producer sends to the new shard and a running PushConsumer consumes its queues,
  neither restarted, and across the change no acknowledged message is lost, stored twice or
  consumed twice (SPEC P2, C4)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clepsydra_client import ConsumeResult, Producer, PushConsumer
from clepsydra_client.message import Message, SendResult
from clepsydra_client.routing import Router
from clepsydra_client.settings import ROUTE_REFRESH_VAR
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient
from tests.helpers import grow
from tests.integration.cluster.conftest import LEVELS, TOPIC
from tools.parts import Stack
from tools.processes import wait_until

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {"heartbeat_interval_s": 0.5, "persist_interval_s": 0.5,
                        "pull_hold_ms": 200}


@pytest.fixture
def two_shards(tmp_path: Path) -> Iterator[Stack]:
    """Redis, two store shards and the retry service; the topic with 2 queues a shard."""
    stack = Stack(tmp_path / "grow", env={"CLEPSYDRA_DELAY_LEVELS": LEVELS})
    stack.with_redis().with_store(shards=2).with_retry().start()
    try:
        http = HttpClient(stack.shard_urls[0])
        http.post("/v1/topics", {"name": TOPIC, "queues": 2})
        http.close()
        yield stack
    finally:
        stack.stop()


def _shard(result: SendResult) -> int:
    return int(result.offset_msg_id[8:12], 16)  # DEC-shard-in-msgid


def _stored(urls: list[str]) -> Counter[str]:
    """Every body stored on the topic, on every shard, with its count."""
    bodies: Counter[str] = Counter()
    for url in urls:
        http = HttpClient(url)
        for q in http.get(http.path("/v1/topics/{}", TOPIC))["queues"]:
            offset = q["minOffset"]
            while offset < q["maxOffset"]:
                page = http.get(http.path("/v1/topics/{}/queues/{}/messages", TOPIC,
                                          q["queueId"]), {"offset": offset, "max": 1000})
                bodies.update(m["body"] for m in page["messages"])
                if page["nextOffset"] <= offset:
                    break
                offset = page["nextOffset"]
        http.close()
    return bodies


def test_a_router_reads_a_shard_added_under_it_at_its_first_answer(two_shards: Stack) -> None:
    # DEC-route-refresh: a frozen clock, so the refresh period never passes and the route read
    # once is kept (INCOMPLETE_REFRESH_S never passes either): only the answers' shard count
    # can tell the router the cluster grew
    store = HttpClient(two_shards.shard_urls[0])
    router = Router(store, clock=lambda: 1000.0)
    path = store.path("/v1/topics/{}/messages", TOPIC)

    def send(body: str) -> int:
        return router.send(TOPIC, lambda http: http.post(path, {"body": body}))[1]

    try:
        assert {send(f"before{i}") for i in range(6)} == {0, 1}
        urls = grow(two_shards, 3)
        shards: list[int] = []
        refused: list[ClepsydraError] = []
        for i in range(30):
            try:
                shards.append(send(f"after{i}"))
            except ClepsydraError as exc:  # a send on a connection the restart cut
                refused.append(exc)
        assert 2 in shards, (Counter(shards), refused)
        assert Counter(shards)[2] >= 5  # in turn with the others, not once by chance
        assert [m.id for m in router.members()] == [0, 1, 2]
        assert len(refused) <= 2, refused
    finally:
        router.close()
        store.close()
    assert set(_stored(urls).values()) == {1}  # nothing stored twice


def test_a_running_producer_and_consumer_take_a_new_shard_without_a_restart(
        two_shards: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # the refresh period far away: the new shard is found from the answers (DEC-route-refresh)
    monkeypatch.setenv(ROUTE_REFRESH_VAR, "600")
    url = two_shards.shard_urls[0]
    lock = threading.Lock()
    consumed: Counter[str] = Counter()
    consumed_on: Counter[int] = Counter()

    def listener(messages: list[Message], _ctx: Any) -> ConsumeResult:
        with lock:
            consumed.update(m.text for m in messages)
            consumed_on.update(m.shard for m in messages)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("grow", url, two_shards.retry.url, **FAST)
    consumer.subscribe(TOPIC)
    consumer.register_concurrent(listener)
    consumer.start()
    acked: list[SendResult] = []
    refused: list[str] = []
    stop = threading.Event()
    producer = Producer(url)

    def send_loop() -> None:
        i = 0
        while not stop.is_set():
            try:
                acked.append(producer.send(TOPIC, f"m{i}"))
            except ClepsydraError as exc:  # not acknowledged: the producer knows
                refused.append(f"m{i}: {exc.code} {exc}")
            i += 1
            time.sleep(0.01)

    sender = threading.Thread(target=send_loop)
    sender.start()
    try:
        wait_until(lambda: len(acked) >= 20, 30, what="sends before the change")
        urls = grow(two_shards, 3)
        wait_until(lambda: sum(1 for r in acked if _shard(r) == 2) >= 20, 60,
                   what="the running producer sending to the new shard")
        wait_until(lambda: consumed_on[2] >= 20, 60,
                   what="the running consumer consuming the new shard's queues")
    finally:
        stop.set()
        sender.join(30)
        producer.close()
    sent = Counter(r.msg_id for r in acked)
    bodies = {f"m{i}" for i in range(len(acked) + len(refused))} - {
        r.split(":")[0] for r in refused}
    wait_until(lambda: set(consumed) >= bodies, 60, what="every acknowledged send consumed")
    time.sleep(1.5)  # a second copy would come now
    consumer.shutdown()
    stored = _stored(urls)
    on = Counter(_shard(r) for r in acked)
    print(f"grow: acked={len(acked)} refused={len(refused)} by shard={dict(on)} "
          f"consumed by shard={dict(consumed_on)}")
    # a send fails only when its answer was lost (a store stopping under it: it may be
    # stored, so it is not sent again, DEC-shard-send-retry) - never because the route named
    # the new shard before the membership gave its address (DEC-route-refresh)
    assert [r for r in refused if "SERVICE_UNAVAILABLE" not in r] == []
    assert set(sent.values()) == {1}
    assert {b for b in bodies if stored[b] != 1} == set()  # none lost, none stored twice
    assert set(stored) <= bodies | {r.split(":")[0] for r in refused}
    assert {b for b in bodies if consumed[b] != 1} == set()  # consumed once each (C4)
    assert set(on) == {0, 1, 2}
