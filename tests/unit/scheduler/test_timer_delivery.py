"""The timers' delivery core with fakes (issue 15, SPEC T2, D6): the lease decides who runs,
a failed store call backs off and is tried again (nothing skipped), the run ends holding the
lease for its successor, a stop releases it."""

from __future__ import annotations

from clepsydra_core.wire.timers import TimerHandoverAnswer
from clepsydra_scheduler.delivery import RunOutcome
from clepsydra_scheduler.ports import StoreCallFailed
from clepsydra_scheduler.timer_delivery import TimerConfig, TimerDelivery
from tests.fixtures.scheduler import FakeClock


class FakeLease:
    def __init__(self, holder: str | None = None) -> None:
        self.holder = holder

    def acquire(self, token: str, ttl_ms: int) -> bool:
        if self.holder in (None, token):
            self.holder = token
            return True
        return False

    def renew(self, token: str, ttl_ms: int) -> bool:
        return self.holder == token

    def release(self, token: str) -> bool:
        if self.holder == token:
            self.holder = None
            return True
        return False


class FakeTimers:
    """Hands over ``due`` timers per call; fails the calls listed in ``fail``."""

    def __init__(self, clock: FakeClock, due: list[int], fail: set[int]) -> None:
        self.clock, self.due, self.fail = clock, due, fail
        self.calls = 0

    def timer_handover(self, max_count: int, wait_ms: int) -> TimerHandoverAnswer:
        self.calls += 1
        if self.calls in self.fail:
            raise StoreCallFailed("store down", status=503)
        n = self.due.pop(0) if self.due else 0
        if not n:
            self.clock.wait(wait_ms / 1000)  # the store's wait
        else:
            self.clock.wait(0.001)
        if len(self.due) == 0 and not self.fail - set(range(self.calls + 1)):
            self.clock.stop()
        return TimerHandoverAnswer(n, 0, None, [0] * n)


def test_a_run_delivers_backs_off_on_failure_and_stops_releasing_its_lease() -> None:
    # SPEC D6 for timers: a failed call waits backoff_s, then the same work is asked again
    clock = FakeClock()
    store = FakeTimers(clock, [3, 0, 2], fail={2})
    lease = FakeLease()
    report = TimerDelivery(TimerConfig(backoff_s=10.0, run_s=3_600), store, lease,
                           clock).run("t1")
    assert (report.delivered, report.store_failures, report.outcome) == (
        5, 1, RunOutcome.STOPPED)
    assert 10.0 in clock.waits
    assert lease.holder is None  # released at the stop


def test_another_runs_lease_means_nothing_is_done() -> None:
    clock = FakeClock()
    store = FakeTimers(clock, [1], fail=set())
    report = TimerDelivery(TimerConfig(), store, FakeLease("other"), clock).run("mine")
    assert report.outcome is RunOutcome.NOT_ACQUIRED and store.calls == 0


def test_the_run_period_ends_with_the_lease_held_for_the_successor() -> None:
    clock = FakeClock()
    lease = FakeLease()
    report = TimerDelivery(TimerConfig(run_s=0.0), FakeTimers(clock, [], set()), lease,
                           clock).run("t1")
    assert report.outcome is RunOutcome.RUN_ENDED and lease.holder == "t1"
    assert TimerConfig(lease_ms=10_000).wait_ms == 1_000  # a call waits well inside the lease


class CountingLease(FakeLease):
    def __init__(self) -> None:
        super().__init__()
        self.renewals = 0

    def renew(self, token: str, ttl_ms: int) -> bool:
        self.renewals += 1
        return super().renew(token, ttl_ms)


def test_the_lease_is_renewed_once_a_third_of_it_has_passed_not_before_every_call() -> None:
    # issue 14 (SPEC D1): while timers fall due a call returns within a millisecond, so a
    # renewal before every call was a Redis round trip per call; now one per third of the
    # lease, and a lost lease still ends the run at the next renewal
    clock = FakeClock()
    store = FakeTimers(clock, [1] * 9_000, fail=set())  # 9 s of calls, 1 ms each
    lease = CountingLease()
    report = TimerDelivery(TimerConfig(lease_ms=3_000, run_s=3_600), store, lease,
                           clock).run("t1")
    assert report.handovers == 9_000 and report.delivered == 9_000
    assert lease.renewals == report.renewals == 8  # at 1 s, 2 s, ... 8 s; not 9,000
    assert TimerConfig(lease_ms=3_000).renew_ms + TimerConfig(lease_ms=3_000).wait_ms < 3_000


def test_a_lease_taken_over_is_noticed_at_the_next_renewal() -> None:
    # SPEC D1: fencing kept; the run stops calling once its lease is someone else's
    clock = FakeClock()
    store = FakeTimers(clock, [1] * 5_000, fail=set())
    lease = FakeLease()
    clock.at(clock.now + 1_500, lambda: setattr(lease, "holder", "other"))
    report = TimerDelivery(TimerConfig(lease_ms=3_000, run_s=3_600), store, lease,
                           clock).run("t1")
    assert report.outcome is RunOutcome.LEASE_LOST
    assert 1_500 <= store.calls <= 2_000  # the renewal due at 2,000 ms found it lost


def test_while_timers_fall_due_a_call_comes_the_interval_after_one_that_returned_some() -> None:
    # DEC-timer-call-interval: each call takes what fell due in the interval, not a few timers
    clock = FakeClock()
    store = FakeTimers(clock, [2, 3, 0, 4], fail=set())
    report = TimerDelivery(TimerConfig(run_s=3_600, interval_ms=20), store, FakeLease(),
                           clock).run("t1")
    assert report.delivered == 9 and report.outcome is RunOutcome.STOPPED
    # after the calls that returned 2 and 3 timers: a pause of the interval from its answer;
    # after the empty one (the store's own wait for the next due timer): none
    paced = [w for w in clock.waits if 0 < w < 0.5]
    assert paced == [0.001, 0.02, 0.001, 0.02, 0.001]


def test_a_full_batch_is_followed_at_once_so_a_backlog_drains_without_pauses() -> None:
    clock = FakeClock()
    store = FakeTimers(clock, [100, 100, 100, 7], fail=set())
    report = TimerDelivery(TimerConfig(run_s=3_600, batch=100, interval_ms=20), store,
                           FakeLease(), clock).run("t1")
    assert report.delivered == 307
    assert 0.02 not in clock.waits  # no pause after the full batches (the last one: stopped)
