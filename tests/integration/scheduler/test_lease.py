"""Leases that name their holder, and the store's fence (DEC-scheduler-lease), against a real
redis-server and a real store: a restarted worker takes its levels back at once; a superseded
holder is refused by the store; two live workers never deliver a level at the same time; each
entry exactly once throughout (SPEC D1, D9)."""

from __future__ import annotations

import threading
import time

import pytest

from clepsydra_core.naming import delay_lease_key
from clepsydra_scheduler.delivery import DeliveryConfig, LevelDelivery, RunOutcome, SystemClock
from clepsydra_scheduler.handover_client import HttpHandoverApi
from clepsydra_scheduler.level_state import RedisLevelState
from clepsydra_scheduler.ports import (
    LeaseToken,
    LevelSample,
    StoreCallFailed,
    WorkerIdentity,
    fence_of,
)
from tests.fixtures.scheduler import TOPIC, SchedulerStack, assert_each_once
from tools.processes import RedisServer, wait_until

pytestmark = pytest.mark.integration

NAME = "pod-a/worker"


def _due(stack: SchedulerStack, count: int, prefix: str = "m") -> list[str]:
    """``count`` level-1 messages, waited for until all are due (level 1 is 1 s)."""
    results = stack.produce(count, level=1, prefix=prefix)
    due_at = max(r["storeTimestamp"] for r in results) + 1_000
    wait_until(lambda: time.time() * 1_000 > due_at + 5, 10, what="the messages due")
    return [f"{prefix}{i}" for i in range(count)]


def test_a_superseded_holder_is_refused_by_the_store_and_its_redis_writes_fail(
        stack: SchedulerStack) -> None:
    # SPEC D9, DEC-scheduler-lease: the holder of level 1 is taken over by a later process of
    # its worker (its lease had a minute left); once the successor's hand-over reached the
    # store, the old holder's is refused (409 FENCED), writes nothing, and its lease token
    # moves nothing in Redis any more
    bodies = _due(stack, 15)
    state = RedisLevelState.from_url(stack.parts.redis_url)
    api = HttpHandoverApi(stack.store.url)
    try:
        old = state.acquire(1, WorkerIdentity(NAME, state.incarnation()), 60_000)
        assert old is not None
        assert api.handover(1, 0, 5, fence=fence_of(old)).delivered == 5
        successor = WorkerIdentity(NAME, state.incarnation())
        new = state.acquire(1, successor, 60_000)
        assert new is not None, "a later incarnation takes the lease at once"
        assert (fence_of(new) or 0) > (fence_of(old) or 0)
        assert api.handover(1, 5, 5, fence=fence_of(new)).delivered == 5

        with pytest.raises(StoreCallFailed) as refused:
            api.handover(1, 10, 5, fence=fence_of(old))
        assert refused.value.fenced and refused.value.status == 409
        assert stack.api.count(TOPIC) == 10  # the refused call wrote nothing
        assert not state.renew(1, old, 60_000)
        assert not state.commit(1, old, 15, LevelSample())
        assert state.refence(1, old, 100, 60_000) is None  # no way back in
        assert state.acquire(1, WorkerIdentity(NAME, 1), 60_000, old) is None

        # the Lua scripts write the layout ports.LeaseToken reads; the store shows the fence
        held = LeaseToken.decode(stack.redis().get(delay_lease_key(1)) or "")
        assert held is not None and held.holder == successor and held.fence == fence_of(new)
        assert stack.api.levels()[1]["fence"] == fence_of(new)
        assert api.handover(1, 10, 5, fence=fence_of(new)).delivered == 5
        assert_each_once(stack.api.pull_all(TOPIC), bodies)

        # Redis restarted empty: the next process still gets a later incarnation than every
        # one before (the counter never goes below Redis's clock)
        stack.redis().flushall()
        assert state.incarnation() > successor.incarnation
    finally:
        api.close()


def test_two_live_workers_with_different_names_contend_and_only_one_delivers(
        stack: SchedulerStack) -> None:
    # SPEC D1, D9: two workers start a run of level 1 at the same moment; one takes the
    # lease and delivers everything, the other's run returns at once, having called nothing
    bodies = _due(stack, 300)
    start = threading.Barrier(2)
    reports = {}

    def run(name: str) -> None:
        state = RedisLevelState.from_url(stack.parts.redis_url)
        worker = WorkerIdentity(name, state.incarnation())
        api = HttpHandoverApi(stack.store.url)
        stop = threading.Event()
        delivery = LevelDelivery(DeliveryConfig(level=1, delay_ms=1_000, run_s=3.0, batch=50),
                                 api, state, SystemClock(stop), worker=worker)
        start.wait()
        try:
            reports[name] = delivery.run()
        finally:
            api.close()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("pod-a/w", "pod-b/w")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    outcomes = sorted((r.outcome, r.delivered, r.handovers > 0) for r in reports.values())
    assert outcomes == [(RunOutcome.NOT_ACQUIRED, 0, False), (RunOutcome.RUN_ENDED, 300, True)]
    assert_each_once(stack.api.pull_all(TOPIC), bodies)


def test_a_worker_killed_and_restarted_under_its_name_takes_its_levels_back_at_once(
        stack: SchedulerStack) -> None:
    # DEC-scheduler-lease with real processes: leases of ten minutes, so only a take-over can
    # deliver before the test's timeout; the restarted worker (same pod and worker id, a new
    # process) does, and the leases name its new incarnation
    long_lease = {"CLEPSYDRA_SCHEDULER_LEASE_S": "600", "CLEPSYDRA_SCHEDULER_POD_NAME": "pod-a",
                  "CLEPSYDRA_SCHEDULER_WORKER_ID": "w"}
    stack.beat(**long_lease)
    first = stack.worker("w-first", **long_lease)
    stack.produce(50, level=1, prefix="before-")
    stack.wait_delivered(50)
    r = stack.redis()
    before = LeaseToken.decode(r.get(delay_lease_key(1)) or "")
    assert before is not None and before.name == "pod-a/w"
    first.kill()
    stack.produce(50, level=1, prefix="after-")
    restarted = stack.worker("w-restarted", **long_lease)
    stack.wait_delivered(100, timeout_s=60)
    after = LeaseToken.decode(r.get(delay_lease_key(1)) or "")
    assert after is not None and after.name == "pod-a/w"
    assert after.incarnation > before.incarnation and after.fence > before.fence
    assert (r.pttl(delay_lease_key(1)) or 0) > 500_000  # held (renewed), far from expiring
    assert_each_once(stack.api.pull_all(TOPIC), [f"before-{i}" for i in range(50)]
                     + [f"after-{i}" for i in range(50)])
    wait_until(lambda: "run finished level=1" in restarted.log(), 30,
               what="the restarted worker's run of level 1")


def test_a_take_tried_again_after_its_answer_was_lost_gets_back_the_lease_it_took(
        redis_server: RedisServer) -> None:
    # DEC-scheduler-chain-rides-out: the acquire script ran, and Redis went away before its
    # answer came; the run tries again with the same run id and gets the lease its first try
    # took (the same token, no second fence), where any other take is still refused
    state = RedisLevelState.from_url(redis_server.url)
    me = WorkerIdentity(NAME, state.incarnation())
    run = LeaseToken.new_run()
    first = state.acquire(1, me, 5_000, None, run)
    assert first is not None and LeaseToken.decode(first) == LeaseToken(
        me.incarnation, 1, run, NAME)
    state.client.pexpire(delay_lease_key(1, 0), 1_000)
    assert state.acquire(1, me, 5_000, None, run) == first
    assert (state.lease_ttl_ms(1) or 0) > 1_000  # the try again renewed it for its lease
    assert state.acquire(1, me, 5_000) is None  # another run of this process: refused
    assert state.acquire(1, me, 5_000, "2 1 9 other " + NAME, run + "x") is None
    later = WorkerIdentity(NAME, state.incarnation())
    taken = state.acquire(1, later, 5_000, None, run)  # a later process: takes it over
    assert taken is not None and fence_of(taken) == 2
    assert state.acquire(1, me, 5_000, None, run) is None  # the first try's own run no more
