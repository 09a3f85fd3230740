"""Exactly once across crashes and races (SPEC D1, D2, D9), with real processes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from clepsydra_core.naming import delay_lease_key, delay_offset_key
from tests.fixtures.scheduler import TOPIC, SchedulerStack, assert_each_once
from tools.processes import RedisServer, wait_until

pytestmark = pytest.mark.integration


def test_kill_9_of_the_worker_while_it_delivers_then_restart(stack: SchedulerStack) -> None:
    # SPEC D9: 5,000 due messages; the worker is SIGKILLed mid-delivery; each arrives once.
    # Its lease outlives it; beat's keep-alive restarts the level once the lease expires.
    stack.beat()
    stack.produce(5_000, level=1)
    time.sleep(1.0)  # every message falls due before the worker starts
    first = stack.worker(CLEPSYDRA_SCHEDULER_BATCH="10")
    wait_until(lambda: stack.api.count(TOPIC) > 0, 30, interval_s=0.005,
               what="the first deliveries")
    first.kill()
    at_kill = stack.api.count(TOPIC)
    assert 0 < at_kill < 5_000, "the kill must land mid-delivery"
    stack.worker(name="worker-restarted", CLEPSYDRA_SCHEDULER_BATCH="500")
    stack.wait_delivered(5_000)
    time.sleep(0.5)  # a late duplicate would show up here
    assert_each_once(stack.api.pull_all(TOPIC), [f"m{i}" for i in range(5_000)])


def test_two_workers_sharing_redis_deliver_each_message_once(stack: SchedulerStack) -> None:
    # SPEC D1: the lease makes one of them the level's deliverer at a time
    a = stack.worker("worker-a", CLEPSYDRA_SCHEDULER_RUN_S="1")
    b = stack.worker("worker-b", CLEPSYDRA_SCHEDULER_RUN_S="1")
    for batch in range(4):
        stack.produce(250, level=1, prefix=f"b{batch}-")
        time.sleep(0.3)
    stack.wait_delivered(1_000)
    time.sleep(0.5)
    assert_each_once(stack.api.pull_all(TOPIC),
                     [f"b{n}-{i}" for n in range(4) for i in range(250)])
    assert "run finished level=1" in a.log() + b.log()


def test_two_workers_without_a_common_lease_still_deliver_once(
        stack: SchedulerStack, tmp_path: Path) -> None:
    # SPEC D9 without the lease: each worker has its own Redis, so both deliver level 1 at
    # the same time; the store's durable handed-over mark refuses the replays
    other = RedisServer(tmp_path / "redis-b").start()
    try:
        stack.produce(2_000, level=1)
        time.sleep(1.0)
        stack.worker("worker-a", CLEPSYDRA_SCHEDULER_BATCH="20")
        stack.worker("worker-b", redis_url=other.url, CLEPSYDRA_SCHEDULER_BATCH="20")
        stack.wait_delivered(2_000)
        time.sleep(1.0)
        assert_each_once(stack.api.pull_all(TOPIC), [f"m{i}" for i in range(2_000)])
        assert stack.api.levels()[1]["handedOver"] == 1_999
    finally:
        other.stop()


def test_progress_survives_a_redis_restart(stack: SchedulerStack, tmp_path: Path) -> None:
    # SPEC D2: the stack's Redis is append-only; progress and the lease come back with it
    durable = RedisServer(tmp_path / "redis-aof", appendonly=True).start()
    try:
        r = stack.redis(durable.url)
        stack.beat(CLEPSYDRA_REDIS_URL=durable.url)
        stack.worker(redis_url=durable.url)
        stack.produce(100, level=1, prefix="before-")
        stack.wait_delivered(100)
        wait_until(lambda: r.get(delay_offset_key(1)) == "100", 20, what="progress saved")
        time.sleep(1.2)  # appendfsync everysec
        durable.stop()
        durable = RedisServer(tmp_path / "redis-aof", port=durable.port, appendonly=True).start()
        r = stack.redis(durable.url)
        assert r.get(delay_offset_key(1)) == "100"
        stack.produce(50, level=1, prefix="after-")
        stack.wait_delivered(150)
        wait_until(lambda: r.get(delay_offset_key(1)) == "150", 30, what="progress after")
        assert r.get(delay_lease_key(1)) is not None  # a worker serves level 1 again
        assert_each_once(stack.api.pull_all(TOPIC), [f"before-{i}" for i in range(100)]
                         + [f"after-{i}" for i in range(50)])
    finally:
        durable.stop()


def test_redis_restarted_empty_delivers_nothing_twice_and_nothing_lost(
        stack: SchedulerStack, tmp_path: Path) -> None:
    # SPEC D2, D9 ("Redis restarted empty"): the level offsets, leases and fence
    # counters are gone; the worker goes on (or starts from 0 again: the store's handed-over
    # mark skips what was delivered); a fence counter started over is raised above the store's
    redis_dir = tmp_path / "redis-lost"
    volatile = RedisServer(redis_dir).start()
    try:
        stack.beat(CLEPSYDRA_REDIS_URL=volatile.url)
        worker = stack.worker(redis_url=volatile.url)
        stack.produce(100, level=1, prefix="before-")
        stack.wait_delivered(100)
        wait_until(lambda: stack.redis(volatile.url).get(delay_offset_key(1)) == "100", 20,
                   what="progress saved")
        port = volatile.port
        volatile.kill()
        shutil.rmtree(redis_dir)
        volatile = RedisServer(redis_dir, port=port).start()
        r = stack.redis(volatile.url)
        assert r.get(delay_offset_key(1)) is None  # Redis forgot everything
        stack.produce(50, level=1, prefix="after-")
        stack.wait_delivered(150)
        wait_until(lambda: r.get(delay_offset_key(1)) == "150", 30, what="progress rebuilt")
        assert_each_once(stack.api.pull_all(TOPIC), [f"before-{i}" for i in range(100)]
                         + [f"after-{i}" for i in range(50)])
        # the level's run takes its free lease again and goes on from the progress it holds
        # (DEC-scheduler-lease), or a new run starts from 0 and the store's mark skips (D9)
        log = worker.log()
        assert "lease found free level=1" in log or \
            "entries already handed over level=1" in log
    finally:
        volatile.stop()
