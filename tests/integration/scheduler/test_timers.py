"""Timer messages delivered by the real scheduler (SPEC T1, T2): redis-server, the
store process, Celery worker and beat. Never early, on time (the delivered copy's store
timestamp is at or after its time; how soon after is the benchmark's, bench/timers.py), once;
after kill -9 of the worker, of the store, of everything at once, mid-delivery; cancel racing
the hand-over (exactly one of delivered / cancelled happens, and the answer says which)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from clepsydra_core import naming
from clepsydra_core import properties as P
from tests.fixtures.scheduler import TOPIC, SchedulerStack, StoreApi, assert_each_once
from tests.helpers import now_ms
from tests.integration.scheduler.test_crash_store import _kill_all_at_once
from tools.processes import RedisServer, wait_until

pytestmark = pytest.mark.integration

N = 3_000



def _produce_timers(stack: SchedulerStack, times: list[int]) -> list[dict[str, Any]]:
    return stack.api.produce(TOPIC, [{"body": f"m{i}", "deliverAt": at}
                                     for i, at in enumerate(times)])


def _count(stack: SchedulerStack) -> int:
    try:
        return stack.api.count(TOPIC)
    except (requests.RequestException, AssertionError):
        return 0


def _reconnect(stack: SchedulerStack) -> None:
    stack.api.close()
    stack.api = StoreApi(stack.store.url)


def _assert_all_once(stack: SchedulerStack, n: int) -> None:
    wait_until(lambda: _count(stack) >= n, 90, interval_s=0.1, what=f"{n} messages")
    time.sleep(1.0)  # a late duplicate would show up here
    assert_each_once(stack.api.pull_all(TOPIC), [f"m{i}" for i in range(n)])


def test_timers_arrive_never_early_at_their_time_and_once(stack: SchedulerStack) -> None:
    # SPEC T1, T2: exact times (ms), spread over 3 s, in any arrival order
    stack.beat()
    stack.worker()
    base = now_ms() + 1_500
    times = [base + (i * 7919) % 3_000 for i in range(300)]
    answers = _produce_timers(stack, times)
    assert [a["deliverAt"] for a in answers] == times
    assert all(a["topic"] == naming.TIMER_TOPIC for a in answers)
    assert stack.api.count(TOPIC) == 0
    stack.wait_delivered(300)
    messages = stack.api.pull_all(TOPIC)
    assert_each_once(messages, [f"m{i}" for i in range(300)])
    for m in messages:
        due = times[int(m["body"][1:])]
        assert int(m["properties"][P.DELIVER_TS]) == due
        assert m["storeTimestamp"] >= due  # never early
        assert m["properties"][P.SCHEDULE_OFFSET].startswith("0:")
    backlog = stack.api.session.get(f"{stack.store.url}/v1/schedule/timers").json()
    assert backlog["pending"] == 0 and backlog["handedOver"] == 300
    assert backlog["lateness"]["max"] >= backlog["lateness"]["p50"] >= 0


def test_kill_9_of_the_worker_mid_delivery(stack: SchedulerStack) -> None:
    # SPEC T2 (D9): the timers' lease outlives the killed worker; the next run delivers the
    # rest, each once
    stack.beat()
    _produce_timers(stack, [now_ms() + 500] * N)
    time.sleep(1.0)
    first = stack.worker(CLEPSYDRA_SCHEDULER_BATCH="10")
    wait_until(lambda: _count(stack) > 0, 30, interval_s=0.005, what="the first deliveries")
    first.kill()
    assert 0 < stack.api.count(TOPIC) < N, "the kill must land mid-delivery"
    stack.worker(name="worker-restarted", CLEPSYDRA_SCHEDULER_BATCH="500")
    _assert_all_once(stack, N)


def test_kill_9_of_the_store_mid_delivery(stack: SchedulerStack) -> None:
    # SPEC T2, P3: the store recovers its timer index from the CommitLog
    _produce_timers(stack, [now_ms() + 500] * N)
    time.sleep(1.0)
    stack.beat()
    stack.worker(CLEPSYDRA_SCHEDULER_BATCH="10")
    wait_until(lambda: _count(stack) >= N // 10, 30, interval_s=0.005, what="a tenth")
    stack.store.kill()
    stack.restart_store(stop=False)
    _reconnect(stack)
    _assert_all_once(stack, N)


def test_kill_9_of_everything_at_once(stack: SchedulerStack, tmp_path: Path) -> None:
    # SPEC T2: store, worker, beat and Redis SIGKILLed at one instant; each timer arrives once
    redis_dir = tmp_path / "redis-aof"
    durable = RedisServer(redis_dir, appendonly=True).start()
    try:
        _produce_timers(stack, [now_ms() + 500] * N)
        time.sleep(1.0)
        stack.beat(CLEPSYDRA_REDIS_URL=durable.url)
        worker = stack.worker(redis_url=durable.url, CLEPSYDRA_SCHEDULER_BATCH="10")
        wait_until(lambda: _count(stack) >= N // 10, 30, interval_s=0.005, what="a tenth")
        _kill_all_at_once([stack.store, worker, *stack.procs, durable])
        durable = RedisServer(redis_dir, port=durable.port, appendonly=True).start()
        stack.restart_store(stop=False)
        _reconnect(stack)
        stack.beat(CLEPSYDRA_REDIS_URL=durable.url)
        stack.worker(name="worker-restarted", redis_url=durable.url)
        _assert_all_once(stack, N)
    finally:
        durable.stop()


def test_cancel_racing_the_hand_over_is_one_or_the_other(stack: SchedulerStack) -> None:
    # SPEC T1: a cancel sent as the timer falls due: either 200 cancelled (never delivered)
    # or 409 ALREADY_DELIVERED (delivered once); the answer says which.
    # The hand-over takes the timers in the order they were appended; the cancels go the other
    # way, from the last one, so the two sides meet and race wherever either is slow (on a
    # slow machine the hand-over once finished all of them before the first cancel arrived).
    n = 1_000
    stack.beat()
    stack.worker(CLEPSYDRA_SCHEDULER_BATCH="5")
    due = now_ms() + 1_500
    ids = [a["msgId"] for a in _produce_timers(stack, [due] * n)]
    answers: dict[str, int] = {}

    def cancel(part: list[str]) -> None:
        session = requests.Session()
        for msg_id in part:
            answers[msg_id] = session.delete(f"{stack.store.url}/v1/messages/{msg_id}",
                                             timeout=30).status_code
        session.close()

    while now_ms() < due - 20:
        time.sleep(0.005)
    newest_first = ids[::-1]
    threads = [threading.Thread(target=cancel, args=(newest_first[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(answers.values()) <= {200, 409}
    delivered_answers = {m for m, status in answers.items() if status == 409}
    assert delivered_answers and len(delivered_answers) < n, "the race must go both ways"
    time.sleep(1.0)
    by_id = {m["msgId"]: m for m in stack.api.pull_all(TOPIC)}
    assert set(by_id) == delivered_answers
    assert stack.api.count(TOPIC) == len(delivered_answers)  # once each
    backlog = stack.api.session.get(f"{stack.store.url}/v1/schedule/timers").json()
    assert backlog["pending"] == 0
