"""A level's lease, its holder and its fence (DEC-scheduler-lease), and the short back-off on
store errors (DEC-scheduler-store-retry), over the in-memory twins and a virtual clock.

A lease names its holder: the worker's stable name, the incarnation (process) that took it and
a fencing token. A later incarnation of the same name takes it at once; any other worker waits
for it to expire. Every hand-over carries the fence, and the store refuses one older than it has
seen, so a superseded holder delivers nothing more (SPEC D1) while the store's mark keeps each
entry exactly once whoever calls (D9)."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

import pytest

from clepsydra_scheduler.delivery import LevelDelivery, RunOutcome
from clepsydra_scheduler.level_state import MemoryLevelState
from clepsydra_scheduler.ports import LeaseToken, LevelSample, WorkerIdentity, fence_of
from tests.fixtures.scheduler import FakeClock, FakeStore

Make = Callable[..., LevelDelivery]
LEASE_MS = 3_000  # the delivery fixture's lease


def _due(store: FakeStore, clock: FakeClock, count: int, *, level: int = 1,
         prefix: str = "m") -> list[str]:
    bodies = [f"{prefix}{i}" for i in range(count)]
    for body in bodies:
        store.park(level, body, deliver_ts=clock.now - 1)
    return bodies


def _spread(store: FakeStore, clock: FakeClock, count: int, every_ms: int) -> list[str]:
    """``count`` level-1 entries falling due one every ``every_ms`` from now."""
    t0 = clock.now
    for i in range(count):
        clock.at(t0 + i * every_ms - 1_000, functools.partial(store.park, 1, f"m{i}"))
    return [f"m{i}" for i in range(count)]


def test_the_lease_token_names_holder_and_fence_and_reads_back() -> None:
    token = LeaseToken(incarnation=7, fence=42, run="ab12", name="pod-a/worker")
    assert token.encode() == "2 7 42 ab12 pod-a/worker"
    assert LeaseToken.decode(token.encode()) == token
    assert token.holder == WorkerIdentity("pod-a/worker", 7)
    assert fence_of(token.encode()) == 42
    # an older worker's lease (a bare random token) reads as no holder we know: it is only
    # ever taken once it expired
    assert LeaseToken.decode("3f2a9c0d4e5b6a7c8d9e0f1a2b3c4d5e") is None
    assert fence_of("3f2a9c0d4e5b6a7c8d9e0f1a2b3c4d5e") is None


def test_a_restarted_worker_takes_its_levels_back_without_waiting_for_the_lease(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        worker: WorkerIdentity) -> None:
    # DEC-scheduler-lease: the killed process left its lease with 3 s to live; its successor
    # (same name, the next incarnation) delivers at once, not after the expiry
    bodies = _due(store, clock, 5)
    dead = offsets.acquire(1, worker, LEASE_MS)
    assert dead is not None
    t0 = clock.now
    restarted = WorkerIdentity(worker.name, offsets.incarnation())
    report = delivery(1, restarted, run_s=0.5).run()
    assert report.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == bodies
    assert all(d.arrival_ms == t0 for d in store.delivered)  # not after t0 + 3 s
    held = LeaseToken.decode(report.token)
    assert held is not None and held.holder == restarted
    assert held.fence == (fence_of(dead) or 0) + 1
    assert not offsets.renew(1, dead, LEASE_MS)  # the dead process's token holds nothing


def test_another_worker_takes_a_level_only_once_the_gone_workers_lease_expired(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        worker: WorkerIdentity) -> None:
    # SPEC D1: a worker that is really gone (its pod deleted: another name takes over) costs
    # its levels the lease's time to live, no more
    bodies = _due(store, clock, 3)
    assert offsets.acquire(1, worker, LEASE_MS) is not None
    t0 = clock.now
    other = WorkerIdentity("pod-b/worker", offsets.incarnation())
    assert delivery(1, other, run_s=0.5).run().outcome is RunOutcome.NOT_ACQUIRED
    assert store.delivered == []
    clock.wait(LEASE_MS / 1_000)  # beat's keep-alives come meanwhile; the lease expires
    report = delivery(1, other, run_s=0.5).run()
    assert report.outcome is RunOutcome.RUN_ENDED and store.bodies() == bodies
    assert all(d.arrival_ms == t0 + LEASE_MS for d in store.delivered)


def test_an_earlier_incarnation_never_takes_a_level_back_from_a_later_one(
        store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        worker: WorkerIdentity) -> None:
    # two live processes of one name (a misconfiguration): the later one keeps the levels, the
    # earlier one's keep-alives find them held, so the two never take turns
    later = WorkerIdentity(worker.name, offsets.incarnation())
    assert offsets.acquire(1, later, LEASE_MS) is not None
    assert delivery(1, worker).run().outcome is RunOutcome.NOT_ACQUIRED
    assert offsets.acquire(1, worker, LEASE_MS) is None
    assert store.calls == []


def test_a_keep_alive_in_the_process_that_serves_the_level_is_refused(
        offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D1: one run per level in a process too; only the token a run hands on adopts it
    first = delivery(1, run_s=1.0).run()
    assert first.outcome is RunOutcome.RUN_ENDED
    assert delivery(1, run_s=0.1).run().outcome is RunOutcome.NOT_ACQUIRED
    second = delivery(1, run_s=0.1).run(first.token)
    assert second.outcome is RunOutcome.RUN_ENDED
    assert (fence_of(second.token) or 0) > (fence_of(first.token) or 0)
    assert offsets.holder(1) == second.token


def test_a_chained_run_on_another_worker_holds_the_lease_in_its_own_name(
        offsets: MemoryLevelState, delivery: Make, worker: WorkerIdentity) -> None:
    # Celery may give the successor run to any worker: the lease then names that worker, so a
    # restart of the first worker does not take the level from the one serving it
    first = delivery(1, run_s=0.2).run()
    other = WorkerIdentity("pod-b/worker", offsets.incarnation())
    second = delivery(1, other, run_s=0.2).run(first.token)
    held = LeaseToken.decode(second.token)
    assert held is not None and held.holder == other
    restarted = WorkerIdentity(worker.name, offsets.incarnation())
    assert offsets.acquire(1, restarted, LEASE_MS) is None


def test_a_stale_holder_is_refused_by_the_store_once_its_successor_handed_over(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        worker: WorkerIdentity) -> None:
    # SPEC D9, DEC-scheduler-lease: the process that holds level 1 renewed its lease, then is
    # taken over (by its restarted self) while it still runs, and the successor's first
    # hand-over reaches the store before the old one's next: that one is refused, the old run
    # stops without delivering or saving anything more, and every entry arrives exactly once
    bodies = _spread(store, clock, 40, every_ms=100)
    successor = WorkerIdentity(worker.name, offsets.incarnation())
    taken: list[str] = []
    committed: list[int] = []

    def take_over() -> None:
        token = offsets.acquire(1, successor, LEASE_MS)
        assert token is not None
        taken.append(token)
        answer = store.handover(1, 0, 100, fence=fence_of(token))  # its first call
        assert offsets.commit(1, token, answer.next_offset, LevelSample())
        committed.append(answer.next_offset)

    clock.at(clock.now + 1_050, lambda: setattr(store, "before_handover", take_over))
    report = delivery(1, worker, run_s=10.0).run()
    assert report.outcome is RunOutcome.LEASE_LOST
    assert store.fenced == [(1, fence_of(report.token))]
    assert offsets.holder(1) == taken[0]
    by_old = [d.body for d in store.delivered[:report.delivered]]
    assert 0 < len(by_old) < 40 and by_old == bodies[:len(by_old)]
    assert offsets.load(1) == committed[0]  # the old run saved nothing over its successor
    successor_run = delivery(1, successor, run_s=10.0).run(taken[0])
    assert successor_run.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == bodies  # each exactly once, in order
    assert offsets.load(1) == 40


def test_two_schedulers_each_with_its_own_redis_take_turns_without_a_duplicate(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D9, DEC-scheduler-lease: another scheduler, with a Redis of its own, handed level 1
    # over with a newer fence; this run still holds its own lease, so the refused call makes it
    # take a fence above the store's and go on, and the store's mark keeps each entry once
    bodies = _spread(store, clock, 30, every_ms=100)
    clock.at(clock.now + 1_050, lambda: setattr(
        store, "before_handover", lambda: store.set_fence(1, 50)))
    report = delivery(1, run_s=5.0).run()
    assert report.outcome is RunOutcome.RUN_ENDED
    assert len(store.fenced) == 1 and store.fenced[0][0] == 1
    assert fence_of(report.token) == 51
    assert store.bodies() == bodies


def test_two_workers_with_different_names_never_deliver_a_level_at_once(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        worker: WorkerIdentity) -> None:
    # SPEC D1: interleaved keep-alives of two live workers; only the lease's holder delivers,
    # the other's runs return at once, however often they come
    bodies = _spread(store, clock, 30, every_ms=200)
    other = WorkerIdentity("pod-b/worker", offsets.incarnation())
    outcomes: list[tuple[str, RunOutcome]] = []
    token: str | None = None
    for _ in range(6):
        mine = delivery(1, worker, run_s=1.0).run(token)
        outcomes.append(("a", mine.outcome))
        token = mine.token
        outcomes.append(("b", delivery(1, other, run_s=1.0).run().outcome))
    assert outcomes == [("a", RunOutcome.RUN_ENDED), ("b", RunOutcome.NOT_ACQUIRED)] * 6
    assert store.bodies() == bodies
    assert {fence_of(offsets.holder(1) or "")} == {6}  # one take and five hand-ons


def test_a_fence_counter_lost_with_redis_is_raised_above_the_stores(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # DEC-scheduler-lease: Redis restarted empty (leases, progress and fence counters gone)
    # while the store remembers fence 5: the run takes the free lease again (fence 1), sees
    # the store's newer fence, raises its own above it and goes on; nothing twice
    bodies = _spread(store, clock, 30, every_ms=100)
    for _ in range(4):
        offsets.fences[1] = offsets.fences.get(1, 0) + 1  # four earlier takes of the lease

    def redis_restarted_empty() -> None:
        offsets.leases.clear()
        offsets.fences.clear()
        offsets.offsets.clear()

    clock.at(clock.now + 1_500, redis_restarted_empty)
    report = delivery(1, run_s=5.0).run()
    assert report.outcome is RunOutcome.RUN_ENDED
    # taken again with fence 1, raised above the store's 5 before its first call: no refusal
    assert store.fenced == []
    assert fence_of(report.token) == 6 == store.table().levels[0].fence
    assert store.bodies() == bodies
    assert offsets.load(1) == 30


def test_a_store_back_after_an_outage_is_noticed_within_the_backoff_cap(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        caplog: pytest.LogCaptureFixture) -> None:
    # SPEC D6, DEC-scheduler-store-retry: the failed entry is retried after 0.1 s, then 0.2 s,
    # 0.4 s, ... at most the cap (0.5 s); so what fell due during a 6 s outage is handed over
    # within the cap of the store answering again, and nothing is skipped
    bodies = _spread(store, clock, 20, every_ms=500)
    t0 = clock.now
    clock.at(t0 + 1_100, lambda: setattr(store, "down", True))
    clock.at(t0 + 7_100, lambda: setattr(store, "down", False))
    with caplog.at_level(logging.WARNING, logger="clepsydra_scheduler.delivery"):
        report = delivery(1, backoff_s=0.5, run_s=12.0).run()
    assert store.bodies() == bodies
    first_after = min(d.arrival_ms for d in store.delivered if d.arrival_ms >= t0 + 7_100)
    assert first_after <= t0 + 7_100 + 500
    retries = [m.group(1) for r in caplog.records
               if (m := re.search(r"retrying the same entry in (\S+)s", r.getMessage()))]
    assert retries[:6] == ["0.1", "0.2", "0.4", "0.5", "0.5", "0.5"]
    assert report.store_failures == len(retries) >= 12  # tries a second, not one in 10 s
