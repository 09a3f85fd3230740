"""Store shards benchmark (DEC-store-shards): produce and drain with 1, 2 and 3 shards on this
machine, and what a route and a membership read cost as shards are added.

    .venv/bin/python -m bench.shards [--messages N] [--drain N] [--rounds R] [--shards 1,2,3]

Each round starts, for every shard count in turn (alternating the order between rounds: 1 2 3,
then 3 2 1), Redis and that many store shards (tools/parts.py, ``with_store(shards=N)``) on
free ports under a temporary home, and measures:

  produce  N x 1 KiB messages through the SDK (``Producer.send_async``: batches of up to 500,
           each batch to the next shard in turn, DEC-store-shards) from one producer process
           (this one): messages/s, and CPU per message of the stores (summed) and of the
           producer.
  drain    N level-1 messages stored with no scheduler running (spread over the shards), all
           due, then one scheduler worker started: messages/s from the first to the last
           hand-over (every shard's level 1 handed over by its own run, concurrently), and CPU
           per message of the stores and the worker.
  route    the median time of ``GET /v1/routes/{topic}`` and of ``GET /v1/cluster?shares=false``
           asked of shard 0 (200 each): what one peer more adds to a route read.

Everything - the stores, the scheduler worker, Redis and the producer - shares this machine's
cores (2 on the project's machines): more shards than cores cannot add throughput here; the
figures say what a shard costs and how the work spreads, not what N machines would do. The
plan for 100 shards is bench/SHARDS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from bench.delay_delivery import tree_cpu_seconds
from clepsydra_client import Producer
from tools import parts
from tools.processes import Process, free_port

BODY = "x" * 1024
TOPIC = "bench"
QUEUES = 4
LEVELS = "1s 5s"


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its descendants (a store's gunicorn worker)."""
    return tree_cpu_seconds(pid)


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class Result:
    shards: int
    produce_rate: float
    produce_store_us: float
    produce_client_us: float
    drain_rate: float
    drain_store_us: float
    drain_worker_us: float
    route_ms: float
    cluster_ms: float


class ShardStack:
    def __init__(self, home: Path, shards: int) -> None:
        self.stack = parts.Stack(home, env={"CLEPSYDRA_DELAY_LEVELS": LEVELS,
                                            "CLEPSYDRA_LOG_LEVEL": "WARNING"})
        self.stack.with_redis().with_store(shards=shards)
        self.stack.start()
        self.shards = shards
        self.urls = self.stack.shard_urls or [self.stack.store.url]
        self.http = requests.Session()
        self.http.post(f"{self.urls[0]}/v1/topics", json={"name": TOPIC, "queues": QUEUES},
                       timeout=30).raise_for_status()

    def store_pids(self) -> list[int]:
        names = ["store", *(f"store-{i}" for i in range(1, self.shards))]
        return [self.stack.by_name[n].pid for n in names]

    def stores_cpu_s(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.store_pids())

    def count(self, topic: str) -> int:
        route = self.http.get(f"{self.urls[0]}/v1/routes/{topic}", timeout=30).json()
        return sum(q["maxOffset"] - q["minOffset"] for q in route["queues"])

    def handed_over(self) -> int:
        """Level 1's entries handed over, every shard summed."""
        total = 0
        for url in self.urls:
            levels = self.http.get(f"{url}/v1/schedule/levels", timeout=30).json()["levels"]
            total += next(lv["handedOver"] + 1 for lv in levels if lv["level"] == 1)
        return total

    def worker(self) -> Process:
        return self.stack.add(parts.SCHEDULER_WORKER, name="worker",
                              CLEPSYDRA_SCHEDULER_PORT="0", CLEPSYDRA_LOG_LEVEL="INFO")

    def close(self) -> None:
        self.stack.stop()


def produce(stack: ShardStack, n: int, *, level: int = 0) -> tuple[float, float, float]:
    """(messages/s, store CPU us a message, producer CPU us a message)."""
    before = stack.count(TOPIC if not level else "drain")
    store0, own0 = stack.stores_cpu_s(), own_cpu_s()
    started = time.perf_counter()
    with Producer(stack.urls[0], batch_messages=500) as producer:
        topic = TOPIC if not level else "drain"
        futures = [producer.send_async(topic, BODY, delay_level=level) for _ in range(n)]
        producer.flush()
        failed = sum(1 for f in futures if f.exception() is not None)
    elapsed = time.perf_counter() - started
    store1, own1 = stack.stores_cpu_s(), own_cpu_s()
    assert failed == 0, f"{failed} sends failed"
    if not level:
        assert stack.count(TOPIC) - before == n
    return (n / elapsed, (store1 - store0) * 1e6 / n, (own1 - own0) * 1e6 / n)


def drain(stack: ShardStack, n: int) -> tuple[float, float, float]:
    """(messages/s, store CPU us a message, worker CPU us a message)."""
    stack.http.post(f"{stack.urls[0]}/v1/topics", json={"name": "drain", "queues": QUEUES},
                    timeout=30).raise_for_status()
    base = stack.handed_over()
    produce(stack, n, level=1)
    time.sleep(1.5)  # all due
    worker = stack.worker()
    first: float | None = None
    cpu0 = (0.0, 0.0)
    deadline = time.monotonic() + 600
    while True:
        done = stack.handed_over() - base
        now = time.monotonic()
        if first is None and done > 0:
            first = now
            cpu0 = (stack.stores_cpu_s(), cpu_seconds(worker.pid))
        if done >= n:
            break
        if now > deadline:
            raise TimeoutError("the drain did not end in 600 s")
        time.sleep(0.02)
    end = time.monotonic()
    cpu1 = (stack.stores_cpu_s(), cpu_seconds(worker.pid))
    worker.stop()
    assert first is not None
    return (n / max(end - first, 1e-3), (cpu1[0] - cpu0[0]) * 1e6 / n,
            (cpu1[1] - cpu0[1]) * 1e6 / n)


def timed(stack: ShardStack, path: str, params: dict[str, str] | None = None,
          calls: int = 200) -> float:
    """Median ms of a GET to shard 0."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        stack.http.get(f"{stack.urls[0]}{path}", params=params, timeout=30).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(home: Path, shards: int, n: int, drain_n: int) -> Result:
    stack = ShardStack(home, shards)
    try:
        rate, store_us, client_us = produce(stack, n)
        d_rate, d_store_us, d_worker_us = drain(stack, drain_n)
        route_ms = timed(stack, f"/v1/routes/{TOPIC}")
        cluster_ms = timed(stack, "/v1/cluster", {"shares": "false"})
        return Result(shards, rate, store_us, client_us, d_rate, d_store_us, d_worker_us,
                      route_ms, cluster_ms)
    finally:
        stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="produced (200,000)")
    parser.add_argument("--drain", type=int, default=100_000, help="drained (100,000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (2)")
    parser.add_argument("--shards", default="1,2,3", help="shard counts (1,2,3)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the stacks are stopped (finally)
    counts = [int(c) for c in args.shards.split(",")]
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-shards-"))
    print(f"shards bench: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"{args.messages:,} produced, {args.drain:,} drained, {args.rounds} round(s)",
          flush=True)
    results: list[Result] = []
    try:
        for r in range(args.rounds):
            for shards in counts if r % 2 == 0 else list(reversed(counts)):
                result = run(home / f"r{r}-s{shards}", shards, args.messages, args.drain)
                results.append(result)
                print(f"round {r + 1} shards {shards}: produce {result.produce_rate:9,.0f} "
                      f"msgs/s (store {result.produce_store_us:5.1f} us, producer "
                      f"{result.produce_client_us:5.1f} us a message) | drain "
                      f"{result.drain_rate:9,.0f} msgs/s (store {result.drain_store_us:5.1f} "
                      f"us, worker {result.drain_worker_us:5.1f} us) | route "
                      f"{result.route_ms:5.2f} ms, membership {result.cluster_ms:5.2f} ms | "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print("\nmedians per shard count:")
    for shards in counts:
        mine = [x for x in results if x.shards == shards]

        def med(attr: str, of: list[Result] = mine) -> float:
            return statistics.median(getattr(x, attr) for x in of)

        print(f"  {shards} shard(s): produce {med('produce_rate'):9,.0f} msgs/s, drain "
              f"{med('drain_rate'):9,.0f} msgs/s, route {med('route_ms'):.2f} ms, "
              f"membership {med('cluster_ms'):.2f} ms")
    return 0


if __name__ == "__main__":
    free_port()
    sys.exit(main())
