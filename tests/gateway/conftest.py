"""Real parts for the gateway suite (tox env ``gateway``): redis-server, the store, the retry
service, the scheduler and the gateway (``python -m clepsydra_gateway``) as processes on free
ports, from the one stack builder (tools/parts.py), and Apache's official RocketMQ 5 Python
client (``rocketmq-python-client``, pinned in the gateway's pyproject) used as its own
documentation shows.

One stack serves the suite (starting processes is the slow part); every test works in its own
topic and group. The level table is all 1 s, so retries and the back-off the gateway gives
consumers are 1 s steps; groups matching ``fifo-*`` are FIFO groups.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import MessagingServiceStub

from clepsydra_core.runtime.http import HttpClient
from tests.helpers import unique_name
from tools import parts

LEVELS = " ".join(["1s"] * 8)
GATEWAY_ENV = {
    "CLEPSYDRA_DELAY_LEVELS": LEVELS,
    "CLEPSYDRA_GATEWAY_FIFO_GROUPS": "fifo-*",
    "CLEPSYDRA_GATEWAY_LONG_POLL_S": "2",
    "CLEPSYDRA_GATEWAY_RENEW_S": "3",
    "CLEPSYDRA_SCHEDULER_KEEPALIVE_S": "1",
    "CLEPSYDRA_SCHEDULER_POLL_MS": "100",
    "CLEPSYDRA_SCHEDULER_BACKOFF_S": "1",
}


@dataclass
class Gw:
    """The running stack and helpers over it."""

    stack: parts.Stack
    credentials: Credentials

    @property
    def endpoint(self) -> str:
        return self.stack.gateway_endpoint

    @property
    def store(self) -> HttpClient:
        return HttpClient(self.stack.store.url, token=self.admin_token)

    @property
    def retry(self) -> HttpClient:
        return HttpClient(self.stack.retry.url, token=self.admin_token)

    admin_token: str | None = None

    def config(self, credentials: Credentials | None = None) -> ClientConfiguration:
        return ClientConfiguration(self.endpoint, credentials or self.credentials)

    def topic(self, queues: int = 2) -> str:
        name = unique_name("gt")
        self.store.post("/v1/topics", {"name": name, "queues": queues})
        return name

    def group(self, prefix: str = "gg", retry_max_times: int | None = None) -> str:
        name = unique_name(prefix)
        if retry_max_times is not None:
            self.retry.put(self.retry.path("/v1/groups/{}", name),
                           {"retryMaxTimes": retry_max_times})
        return name

    @contextmanager
    def producer(self, *topics: str, credentials: Credentials | None = None
                 ) -> Iterator[Producer]:
        p = Producer(self.config(credentials), topics)
        p.startup()
        try:
            yield p
        finally:
            p.shutdown()

    @contextmanager
    def simple(self, group: str, topic: str, await_s: int = 2,
               credentials: Credentials | None = None) -> Iterator[SimpleConsumer]:
        c = SimpleConsumer(self.config(credentials), group, {topic: FilterExpression()},
                           await_duration=await_s)
        c.startup()
        try:
            yield c
        finally:
            c.shutdown()

    @contextmanager
    def push(self, group: str, topic: str, consume: Callable[[Message], ConsumeResult]
             ) -> Iterator[PushConsumer]:
        c = PushConsumer(self.config(), group, Listener(consume), {topic: FilterExpression()},
                         consumption_thread_count=4)
        c.startup()
        try:
            yield c
        finally:
            c.shutdown()

    def stub(self, ) -> MessagingServiceStub:
        return MessagingServiceStub(grpc.insecure_channel(self.endpoint))

    def messages(self, msg_id: str) -> list[dict[str, Any]]:
        """Every stored copy of a message (GET /v1/messages/{msgId})."""
        return list(self.store.get(self.store.path("/v1/messages/{}", msg_id))["messages"])

    def max_offset(self, topic: str) -> int:
        doc = self.store.get(self.store.path("/v1/topics/{}", topic))
        return sum(q["maxOffset"] for q in doc["queues"])

    def pull_all(self, topic: str) -> list[dict[str, Any]]:
        """Every message stored on ``topic``, all pages of every queue."""
        doc = self.store.get(self.store.path("/v1/topics/{}", topic))
        out: list[dict[str, Any]] = []
        for q in doc["queues"]:
            offset = 0
            while True:  # page to the queue's end: a fast machine stores thousands per test
                path = self.store.path("/v1/topics/{}/queues/{}/messages", topic, q["queueId"])
                page = self.store.get(path, {"offset": offset, "max": 1000})
                out += page["messages"]
                if not page["messages"] or page["nextOffset"] <= offset:
                    break
                offset = page["nextOffset"]
        return out

    def committed(self, group: str, topic: str) -> int:
        """The group's committed offsets on ``topic``, summed over its queues."""
        doc = self.store.get(self.store.path("/v1/groups/{}/offsets", group), {"topic": topic})
        return sum(doc["offsets"].get(topic, {}).values())

    @staticmethod
    def http_text(url: str) -> str:
        return requests.get(url, timeout=10).text

    def dlq(self, group: str) -> list[dict[str, Any]]:
        doc = self.retry.get(self.retry.path("/v1/groups/{}/dlq", group),
                             {"offset": 0, "max": 1000})
        return list(doc["messages"])


class Listener(MessageListener):  # type: ignore[misc]
    def __init__(self, consume: Callable[[Message], ConsumeResult]) -> None:
        self._consume = consume

    def consume(self, message: Message) -> ConsumeResult:
        return self._consume(message)


def message(topic: str, body: str, **fields: Any) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    for name, value in fields.items():
        if name == "keys":
            m.keys = value
        elif name == "properties":
            for k, v in value.items():
                m.add_property(k, v)
        else:
            setattr(m, name, value)
    return m


def receive_until(consumer: SimpleConsumer, count: int, *, invisible_s: int = 10,
                  timeout_s: float = 30.0, ack: bool = True,
                  reconnecting: bool = False) -> list[Message]:
    """Receive (and ack) until ``count`` messages came; ``reconnecting``: a call that fails
    while the client reconnects (after a gateway restart) is made again, as an application
    would."""
    got: list[Message] = []
    give_up = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < give_up:
        try:
            batch = consumer.receive(32, invisible_s)
        except Exception:
            if not reconnecting:
                raise
            time.sleep(0.5)
            continue
        for m in batch:
            if ack:
                consumer.ack(m)
        got += batch
    return got


class Recorder:
    """A PushConsumer listener recording (time, message) per call; ``decide`` says the
    result."""

    def __init__(self, decide: Callable[[Message], bool] = lambda _m: True) -> None:
        self.calls: list[tuple[float, Message]] = []
        self.lock = threading.Lock()
        self.decide = decide

    def __call__(self, m: Message) -> ConsumeResult:
        with self.lock:
            self.calls.append((time.monotonic(), m))
        return ConsumeResult.SUCCESS if self.decide(m) else ConsumeResult.FAILURE

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for _t, m in self.calls]


def start_stack(home: Path, tokens: dict[str, str] | None = None, **env: str) -> parts.Stack:
    """The suite's stack; ``tokens``: each part's own ``CLEPSYDRA_TOKEN`` (auth on)."""
    tokens = tokens or {}

    def own(part: str) -> dict[str, str]:
        return {"CLEPSYDRA_TOKEN": tokens[part]} if part in tokens else {}

    return (parts.Stack(home, env={**GATEWAY_ENV, **env}).with_redis().with_store()
            .with_retry(**own("retry")).with_scheduler(own("scheduler"))
            .with_gateway(**own("gateway")).start())


@pytest.fixture(scope="session")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    stack = start_stack(tmp_path_factory.mktemp("gateway"))
    try:
        yield Gw(stack, Credentials())
    finally:
        stack.stop()


SHARDS = 3


@dataclass
class Gw3(Gw):
    """The suite's stack over three store shards (DEC-store-shards): shard 0 is the address
    the gateway, the retry service and the scheduler are given, as ``make run`` gives it."""

    def shard(self, shard: int) -> HttpClient:
        return HttpClient(self.stack.shard_urls[shard], token=self.admin_token)

    def shard_counts(self, topic: str) -> list[int]:
        """Messages stored on ``topic`` by each shard (its queues' ends summed)."""
        out = []
        for shard in range(SHARDS):
            http = self.shard(shard)
            doc = http.get(http.path("/v1/topics/{}", topic))
            out.append(sum(q["maxOffset"] - q["minOffset"] for q in doc["queues"]))
        return out

    def committed_on(self, group: str, topic: str, shard: int) -> int:
        http = self.shard(shard)
        doc = http.get(http.path("/v1/groups/{}/offsets", group), {"topic": topic})
        return sum(doc["offsets"].get(topic, {}).values())

    def pull_all_shards(self, topic: str) -> list[dict[str, Any]]:
        """Every message stored on ``topic`` by every shard (each shard's queues to their
        ends)."""
        out: list[dict[str, Any]] = []
        for shard in range(SHARDS):
            http = self.shard(shard)
            for q in http.get(http.path("/v1/topics/{}", topic))["queues"]:
                offset = q["minOffset"]
                while offset < q["maxOffset"]:
                    page = http.get(http.path("/v1/topics/{}/queues/{}/messages", topic,
                                              q["queueId"]), {"offset": offset, "max": 1000})
                    out += page["messages"]
                    if page["nextOffset"] <= offset:
                        break
                    offset = page["nextOffset"]
        return out

    def produce_on(self, shard: int, topic: str, body: str) -> str:
        """A message stored on one shard (its own produce): its msgId."""
        http = self.shard(shard)
        return str(http.post(http.path("/v1/topics/{}/messages", topic), {"body": body})["msgId"])

    def shard_name(self, shard: int) -> str:
        return "store" if shard == 0 else f"store-{shard}"


@pytest.fixture(scope="module")
def gw3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw3]:
    """The gateway in front of three store shards (as tests/integration/cluster starts them:
    tools/parts.py ``with_store(shards=3)``), with the retry service and the scheduler."""
    stack = (parts.Stack(tmp_path_factory.mktemp("gateway-shards"), env=dict(GATEWAY_ENV))
             .with_redis().with_store(shards=SHARDS).with_retry().with_scheduler()
             .with_gateway().start())
    try:
        yield Gw3(stack, Credentials())
    finally:
        stack.stop()
