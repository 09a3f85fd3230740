"""The timers' delivery core with fakes (SPEC T2, D6): the lease decides who runs
(taken, handed on and fenced as a level's: DEC-scheduler-lease), a failed store call backs off
briefly and is tried again (nothing skipped; DEC-scheduler-store-retry), the run ends holding
the lease for its successor, a stop releases it."""

from __future__ import annotations

from clepsydra_core.errors import Fenced
from clepsydra_core.wire.timers import TimerHandoverAnswer
from clepsydra_scheduler.delivery import RunOutcome
from clepsydra_scheduler.level_state import MemoryLevelState, MemoryTimerLease
from clepsydra_scheduler.ports import StoreCallFailed, WorkerIdentity, fence_of
from clepsydra_scheduler.timer_delivery import TimerConfig, TimerDelivery, TimerRunReport
from tests.fixtures.scheduler import FakeClock

NAME = "pod-a/worker"


def _lease(clock: FakeClock) -> tuple[MemoryTimerLease, WorkerIdentity]:
    """The timers' lease in the in-memory twin of Redis, and this test's worker."""
    state = MemoryLevelState(clock.now_ms)
    return MemoryTimerLease(state), WorkerIdentity(NAME, state.incarnation())


class FakeTimers:
    """Hands over ``due`` timers per call; fails the calls listed in ``fail``; refuses a call
    whose fence is older than the newest it has seen, as the store does (409 FENCED)."""

    def __init__(self, clock: FakeClock, due: list[int], fail: set[int]) -> None:
        self.clock, self.due, self.fail = clock, due, fail
        self.calls = 0
        self.fence: int | None = None
        self.fenced: list[int] = []

    def timer_fence(self) -> int | None:
        return self.fence

    def timer_handover(self, max_count: int, wait_ms: int,
                       fence: int | None = None) -> TimerHandoverAnswer:
        self.calls += 1
        if self.calls in self.fail:
            raise StoreCallFailed("store down", status=503)
        if fence is not None and self.fence is not None and fence < self.fence:
            self.fenced.append(fence)
            raise StoreCallFailed("409 FENCED", status=409, error_code=Fenced.code)
        if fence is not None:
            self.fence = fence
        n = self.due.pop(0) if self.due else 0
        if not n:
            self.clock.wait(wait_ms / 1000)  # the store's wait
        else:
            self.clock.wait(0.001)
        if len(self.due) == 0 and not self.fail - set(range(self.calls + 1)):
            self.clock.stop()
        return TimerHandoverAnswer(n, 0, None, [0] * n)


def test_a_run_delivers_backs_off_on_failure_and_stops_releasing_its_lease() -> None:
    # SPEC D6 for timers: a failed call waits a short back-off, then the same work is asked
    # again
    clock = FakeClock()
    store = FakeTimers(clock, [3, 0, 2], fail={2})
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(backoff_s=10.0, run_s=3_600), store, lease,
                           clock, worker=me).run()
    assert (report.delivered, report.store_failures, report.outcome) == (
        5, 1, RunOutcome.STOPPED)
    assert 0.1 in clock.waits and 10.0 not in clock.waits
    assert lease.holder() is None  # released at the stop


def test_failed_calls_back_off_from_a_tenth_of_a_second_doubling_to_the_cap() -> None:
    # SPEC D6, DEC-scheduler-store-retry: a store that answers again is noticed within the cap,
    # and a call that succeeds starts the back-off over
    clock = FakeClock()
    store = FakeTimers(clock, [1, 1, 1], fail={2, 3, 4, 5, 6, 8})
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(backoff_s=0.5, run_s=3_600), store, lease,
                           clock, worker=me).run()
    assert report.delivered == 3 and report.store_failures == 6
    assert [w for w in clock.waits if w >= 0.1] == [0.1, 0.2, 0.4, 0.5, 0.5, 0.1]


def test_another_workers_lease_means_nothing_is_done() -> None:
    # SPEC D1: another worker (another name) holds the timers' lease
    clock = FakeClock()
    store = FakeTimers(clock, [1], fail=set())
    lease, me = _lease(clock)
    assert lease.acquire(WorkerIdentity("pod-b/worker", me.incarnation + 1), 10_000)
    report = TimerDelivery(TimerConfig(), store, lease, clock, worker=me).run()
    assert report.outcome is RunOutcome.NOT_ACQUIRED and store.calls == 0


def test_a_restarted_worker_takes_its_previous_process_lease_at_once() -> None:
    # DEC-scheduler-lease: the same worker name, a later incarnation: no wait for the expiry
    clock = FakeClock()
    lease, before = _lease(clock)
    old = lease.acquire(before, 10_000)
    assert old is not None
    after = WorkerIdentity(NAME, before.incarnation + 1)
    report = TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease, clock,
                           worker=after).run()
    assert report.outcome is RunOutcome.RUN_ENDED and lease.holder() == report.token
    new_fence, old_fence = fence_of(report.token), fence_of(old)
    assert new_fence is not None and old_fence is not None and new_fence > old_fence
    assert not lease.renew(old, 10_000)  # the previous process's token holds nothing now
    # and the earlier process cannot take it back from the later one
    assert lease.acquire(before, 10_000) is None


def test_the_run_period_ends_with_the_lease_held_for_the_successor() -> None:
    clock = FakeClock()
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease,
                           clock, worker=me).run()
    assert report.outcome is RunOutcome.RUN_ENDED and lease.holder() == report.token
    assert TimerConfig(lease_ms=10_000).wait_ms == 1_000  # a call waits well inside the lease
    # the successor, handed the token, adopts the lease (another worker may run it)
    other = WorkerIdentity("pod-b/worker", me.incarnation + 1)
    second = TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease,
                           clock, worker=other).run(report.token)
    assert second.outcome is RunOutcome.RUN_ENDED and lease.holder() == second.token


def _a_run_ended(clock: FakeClock) -> tuple[MemoryLevelState, MemoryTimerLease,
                                             WorkerIdentity, TimerRunReport]:
    """The in-memory state and timers' lease after a first run ended, handing its token on."""
    state = MemoryLevelState(clock.now_ms)
    lease, me = MemoryTimerLease(state), WorkerIdentity(NAME, state.incarnation())
    first = TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease,
                          clock, worker=me).run()
    assert first.outcome is RunOutcome.RUN_ENDED
    return state, lease, me, first


def test_a_chained_run_started_while_redis_is_away_waits_for_it() -> None:
    # DEC-scheduler-chain-rides-out, as for a level: the successor handed the token tries the
    # lease again until Redis answers; a run without a token gives up at once
    clock = FakeClock()
    state, lease, me, first = _a_run_ended(clock)
    state.down = True
    assert TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease, clock,
                         worker=me).run().outcome is RunOutcome.NOT_ACQUIRED
    t0 = clock.now
    clock.at(t0 + 1_300, lambda: setattr(state, "down", False))
    store = FakeTimers(clock, [2], set())
    second = TimerDelivery(TimerConfig(run_s=3_600, backoff_s=0.5), store, lease, clock,
                           worker=me).run(first.token)
    assert (second.delivered, second.outcome) == (2, RunOutcome.STOPPED)
    assert clock.waits.count(0.5) >= 3  # tried every half second while Redis was away


def test_a_chained_run_whose_lease_answer_was_lost_gets_the_lease_it_took() -> None:
    # as for a level: the take was made and its answer lost with Redis; the try again is
    # answered with the lease the first took, not refused as someone else's
    clock = FakeClock()
    state, lease, me, first = _a_run_ended(clock)
    state.answers_lost = 1
    t0 = clock.now
    store = FakeTimers(clock, [2], set())
    second = TimerDelivery(TimerConfig(run_s=3_600, backoff_s=0.5), store, lease, clock,
                           worker=me).run(first.token)
    assert state.answers_lost == 0
    assert (second.delivered, second.outcome) == (2, RunOutcome.STOPPED)
    assert clock.now - t0 < 10_000  # not after the lease expired
    assert (fence_of(second.token) or 0) == (fence_of(first.token) or 0) + 1


class CountingLease(MemoryTimerLease):
    def __init__(self, state: MemoryLevelState) -> None:
        super().__init__(state)
        self.renewals = 0

    def renew(self, token: str, ttl_ms: int) -> bool:
        self.renewals += 1
        return super().renew(token, ttl_ms)


def test_the_lease_is_renewed_once_a_third_of_it_has_passed_not_before_every_call() -> None:
    # SPEC D1, DEC-timer-call-interval: while timers fall due a call returns within a
    # millisecond, so a renewal before every call was a Redis round trip per call; now one per
    # third of the lease, and a lost lease still ends the run at the next renewal
    clock = FakeClock()
    state = MemoryLevelState(clock.now_ms)
    store = FakeTimers(clock, [1] * 9_000, fail=set())  # 9 s of calls, 1 ms each
    lease = CountingLease(state)
    report = TimerDelivery(TimerConfig(lease_ms=3_000, run_s=3_600), store, lease, clock,
                           worker=WorkerIdentity(NAME, state.incarnation())).run()
    assert report.handovers == 9_000 and report.delivered == 9_000
    assert lease.renewals == report.renewals == 8  # at 1 s, 2 s, ... 8 s; not 9,000
    assert TimerConfig(lease_ms=3_000).renew_ms + TimerConfig(lease_ms=3_000).wait_ms < 3_000


def test_a_lease_taken_over_is_noticed_at_the_next_renewal_and_fenced_before() -> None:
    # SPEC D1, DEC-scheduler-lease: a later process of the same worker took the lease over at
    # 1.5 s and called the store with its newer fence: the store refuses this run's next
    # call at once (not at its next renewal), and the run stops
    clock = FakeClock()
    store = FakeTimers(clock, [1] * 5_000, fail=set())
    lease, me = _lease(clock)
    newer = WorkerIdentity(NAME, me.incarnation + 1)

    def take_over() -> None:
        token = lease.acquire(newer, 3_000)
        assert token is not None
        store.fence = fence_of(token)  # the new holder's first call

    clock.at(clock.now + 1_500, take_over)
    report = TimerDelivery(TimerConfig(lease_ms=3_000, run_s=3_600), store, lease, clock,
                           worker=me).run()
    assert report.outcome is RunOutcome.LEASE_LOST
    assert 1_500 <= store.calls <= 1_502  # the first call after the take-over was refused
    assert store.fenced == [fence_of(report.token)]


def test_a_fence_counter_lost_with_redis_is_raised_above_the_stores() -> None:
    # DEC-scheduler-lease: Redis restarted empty counts fences from 1 again; the store has
    # seen 40: the run, still the lease's holder, takes a fence above it and goes on
    clock = FakeClock()
    store = FakeTimers(clock, [2, 3], fail=set())
    store.fence = 40
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(run_s=3_600), store, lease, clock, worker=me).run()
    assert store.fenced == [1]
    assert report.delivered == 5 and fence_of(report.token) == 41 == store.fence


def test_while_timers_fall_due_a_call_comes_the_interval_after_one_that_returned_some() -> None:
    # DEC-timer-call-interval: each call takes what fell due in the interval, not a few timers
    clock = FakeClock()
    store = FakeTimers(clock, [2, 3, 0, 4], fail=set())
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(run_s=3_600, interval_ms=20), store, lease,
                           clock, worker=me).run()
    assert report.delivered == 9 and report.outcome is RunOutcome.STOPPED
    # after the calls that returned 2 and 3 timers: a pause of the interval from its answer;
    # after the empty one (the store's own wait for the next due timer): none
    paced = [w for w in clock.waits if 0 < w < 0.5]
    assert paced == [0.001, 0.02, 0.001, 0.02, 0.001]


def test_a_full_batch_is_followed_at_once_so_a_backlog_drains_without_pauses() -> None:
    clock = FakeClock()
    store = FakeTimers(clock, [100, 100, 100, 7], fail=set())
    lease, me = _lease(clock)
    report = TimerDelivery(TimerConfig(run_s=3_600, batch=100, interval_ms=20), store,
                           lease, clock, worker=me).run()
    assert report.delivered == 307
    assert 0.02 not in clock.waits  # no pause after the full batches (the last one: stopped)
