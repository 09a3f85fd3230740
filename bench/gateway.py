"""The RocketMQ 5 gateway beside the project's own SDK, in one run (services/gateway/README.md,
"Benchmarks").

    .venv/bin/python -m bench.gateway [--messages 2000] [--rounds 3] [--timers 300]

Everything runs as real processes on free ports under a temporary CLEPSYDRA_HOME: redis-server,
the store, the retry service, the scheduler and the gateway; the clients run in this process.
Phases, each alternating the two clients round by round on fresh topics and groups:

  send      one thread sends ``--messages`` messages (100-byte bodies) one at a time: the
            official ``Producer.send`` through the gateway, the SDK's ``Producer.send`` to the
            store
  consume   a backlog of ``--messages`` is drained: the official ``SimpleConsumer``
            (``receive(32, 30)`` then ``ack`` of each) through the gateway, the SDK's
            ``PushConsumer`` (FIRST) from the store
  lateness  ``--timers`` scheduled messages, delivery times spread over 3-8 s ahead in whole
            seconds (what the official client sends), received by a ``SimpleConsumer``:
            when its receive answered - delivery time (p50, p99, max), early arrivals

The machine is shared: compare the two clients' ratio within one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from clepsydra_client.consumer.listener import ConsumeFromWhere
from clepsydra_client.consumer.push import PushConsumer as SdkPushConsumer
from clepsydra_client.producer import OutgoingMessage
from clepsydra_client.producer import Producer as SdkProducer
from clepsydra_core.runtime.http import HttpClient
from tools import parts

BODY = "x" * 100


def start(root: Path) -> parts.Stack:
    return (parts.Stack(root).with_redis().with_store().with_retry().with_scheduler()
            .with_gateway().start())


def official_send(stack: parts.Stack, topic: str, n: int) -> float:
    producer = Producer(ClientConfiguration(stack.gateway_endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        started = time.perf_counter()
        for _ in range(n):
            m = Message()
            m.topic, m.body = topic, BODY.encode()
            producer.send(m)
        return n / (time.perf_counter() - started)
    finally:
        producer.shutdown()


def sdk_send(stack: parts.Stack, topic: str, n: int) -> float:
    producer = SdkProducer(stack.store.url)
    try:
        started = time.perf_counter()
        for _ in range(n):
            producer.send(topic, BODY)
        return n / (time.perf_counter() - started)
    finally:
        producer.close()


def backlog(stack: parts.Stack, topic: str, n: int) -> None:
    producer = SdkProducer(stack.store.url)
    try:
        for start_at in range(0, n, 100):
            producer.send_batch(topic, [OutgoingMessage(BODY)] * min(100, n - start_at))
    finally:
        producer.close()


def official_drain(stack: parts.Stack, topic: str, group: str, n: int) -> float:
    consumer = SimpleConsumer(ClientConfiguration(stack.gateway_endpoint, Credentials()), group,
                              {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    try:
        got = 0
        started = time.perf_counter()
        while got < n:
            for m in consumer.receive(32, 30):
                consumer.ack(m)
                got += 1
        return n / (time.perf_counter() - started)
    finally:
        consumer.shutdown()


def sdk_drain(stack: parts.Stack, topic: str, group: str, n: int) -> float:
    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    def listener(messages: list[object], _context: object) -> None:
        with lock:
            count[0] += len(messages)
            if count[0] >= n:
                done.set()

    consumer = SdkPushConsumer(group, stack.store.url, stack.retry.url,
                               consume_from_where=ConsumeFromWhere.FIRST)
    consumer.subscribe(topic)
    consumer.register_concurrent(listener)
    started = time.perf_counter()
    consumer.start()
    try:
        done.wait(300)
        return n / (time.perf_counter() - started)
    finally:
        consumer.shutdown()


def lateness(stack: parts.Stack, topic: str, group: str, n: int) -> dict[str, float]:
    config = ClientConfiguration(stack.gateway_endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    base = int(time.time()) + 3
    for i in range(n):
        m = Message()
        m.topic, m.body = topic, BODY.encode()
        m.delivery_timestamp = base + i % 6
        producer.send(m)
    producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    late: list[float] = []
    try:
        give_up = time.monotonic() + 60
        while len(late) < n and time.monotonic() < give_up:
            batch = consumer.receive(32, 30)
            arrived_ms = time.time() * 1000  # when the receive answered, before any ack
            late += [arrived_ms - m.delivery_timestamp for m in batch]
            for m in batch:
                consumer.ack(m)
    finally:
        consumer.shutdown()
    late.sort()
    return {"received": len(late), "p50": statistics.median(late),
            "p99": late[min(len(late) - 1, int(len(late) * 0.99))], "max": late[-1],
            "early": sum(1 for x in late if x < 0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timers", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="clepsydra-bench-gateway-"))
    stack = start(root / "stack")
    try:
        store = HttpClient(stack.store.url)
        serial = iter(range(1_000_000))

        def topic() -> str:
            name = f"bench-{next(serial)}"
            store.post("/v1/topics", {"name": name, "queues": 4})
            return name

        results: dict[str, list[float]] = {k: [] for k in (
            "official send", "sdk send", "official receive/ack", "sdk push consume")}
        for r in range(args.rounds):
            results["official send"].append(official_send(stack, topic(), args.messages))
            results["sdk send"].append(sdk_send(stack, topic(), args.messages))
            for name, drain in (("official receive/ack", official_drain),
                                ("sdk push consume", sdk_drain)):
                t = topic()
                backlog(stack, t, args.messages)
                results[name].append(drain(stack, t, f"g{next(serial)}", args.messages))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msgs/s"
                                                 for k, v in results.items()), flush=True)
        for name, values in results.items():
            print(f"{name:22s} msgs/s: " + " / ".join(f"{v:,.0f}" for v in values)
                  + f" (median {statistics.median(values):,.0f})")
        for a, b in (("official send", "sdk send"),
                     ("official receive/ack", "sdk push consume")):
            ratio = statistics.median(results[a]) / statistics.median(results[b])
            print(f"{a} / {b}: {ratio:.2f}")
        late = lateness(stack, topic(), f"g{next(serial)}", args.timers)
        print(f"scheduled through the gateway: {late['received']:.0f}/{args.timers} received, "
              f"lateness p50 {late['p50']:.0f} ms, p99 {late['p99']:.0f} ms, max "
              f"{late['max']:.0f} ms, early {late['early']:.0f}")
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
