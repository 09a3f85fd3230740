"""The delivery core over in-memory fakes and a virtual clock (SPEC D1-D10)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import pytest

from clepsydra_core.schedule_rules import corrected_deliver_ts, due_count
from clepsydra_scheduler.delivery import DeliveryConfig, LevelDelivery, RunOutcome
from clepsydra_scheduler.level_state import MemoryLevelState
from clepsydra_scheduler.ports import (
    LevelSample,
    LevelStateUnavailable,
    WorkerIdentity,
    fence_of,
)
from tests.fixtures.scheduler import FakeClock, FakeStore

Make = Callable[..., LevelDelivery]


def test_due_count_stops_at_first_entry_not_due() -> None:
    # SPEC D3, D5
    assert due_count([100, 200, 300, 150], now_ms=200, delay_ms=1_000, limit=10) == 2
    assert due_count([], now_ms=200, delay_ms=1_000, limit=10) == 0
    assert due_count([100, 100, 100], now_ms=200, delay_ms=1_000, limit=2) == 2


def test_due_count_treats_deliver_time_beyond_the_delay_as_due_now() -> None:
    # SPEC D3: tagsCode > now + delay(level) -> the table was shortened: due now
    assert due_count([30_200, 300], now_ms=200, delay_ms=1_000, limit=10) == 1
    assert due_count([1_200], now_ms=200, delay_ms=1_000, limit=10) == 0
    assert corrected_deliver_ts(30_200, 200, 1_000) == 200
    assert corrected_deliver_ts(1_200, 200, 1_000) == 1_200


def test_nothing_is_handed_over_before_its_deliver_time(
        clock: FakeClock, store: FakeStore, delivery: Make) -> None:
    # SPEC D5: never early; the run sleeps until the head is due (no busy polling)
    t0 = clock.now
    for i in range(5):
        clock.at(t0 + i * 300, functools.partial(store.park, 1, f"m{i}"))
    report = delivery(1).run()
    assert report.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == [f"m{i}" for i in range(5)]
    for d in store.delivered:
        assert d.arrival_ms >= d.deliver_ts
        assert d.arrival_ms - d.deliver_ts <= 1
    assert report.delivered == 5
    assert len(clock.waits) < 200  # slept until due, did not spin


def test_all_due_entries_are_delivered_once_in_order(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D4, D9
    for i in range(250):
        store.park(2, f"m{i}", deliver_ts=clock.now - 10)
    report = delivery(2, batch=100).run()
    assert store.bodies() == [f"m{i}" for i in range(250)]
    assert offsets.load(2) == 250
    handovers = [c for c in store.calls if c[0] == "handover"]
    assert all(c[3] <= 100 for c in handovers)
    assert report.delivered == 250 and report.skipped == 0


def test_a_due_backlog_is_drained_without_reading_entries_between_full_batches(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D4, D5: after a whole batch, the next hand-over goes straight away (the store
    # re-checks due-ness and stops at the first entry not due)
    for i in range(350):
        store.park(2, f"m{i}", deliver_ts=clock.now - 10)
    for i in range(3):
        store.park(2, f"late{i}")  # due after the level's delay, after this run
    delivery(2, batch=100, run_s=1.0).run()
    assert store.bodies() == [f"m{i}" for i in range(350)]  # never early (D5)
    assert offsets.load(2) == 350
    calls = [c for c in store.calls if c[0] in ("entries", "handover")]
    # one entries read, then 100 + 100 + 100 + 50 (the last stopped by the store at the
    # first entry not due), where reading before each batch took 8 calls
    assert [c[0] for c in calls] == ["entries"] + ["handover"] * 4
    assert [c[2] for c in calls[1:]] == [0, 100, 200, 300]


def test_shortened_table_entry_is_delivered_now(
        clock: FakeClock, store: FakeStore, delivery: Make) -> None:
    # SPEC D3: stored under "30s", level 3 is now 3s: deliver at once, not after 30 s
    store.park(3, "old", deliver_ts=clock.now + 30_000)
    t0 = clock.now
    delivery(3, run_s=1.0).run()
    assert store.bodies() == ["old"]
    assert store.delivered[0].arrival_ms - t0 < 10


def test_store_failure_keeps_progress_and_retries_after_backoff(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        caplog: pytest.LogCaptureFixture) -> None:
    # SPEC D6: progress stays at the failed entry; retried after the back-off; nothing skipped
    for i in range(3):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    store.park(1, "m3", deliver_ts=clock.now + 500)
    store.park(1, "m4", deliver_ts=clock.now + 500)
    t0 = clock.now
    clock.at(t0 + 400, lambda: setattr(store, "down", True))
    clock.at(t0 + 5_000, lambda: setattr(store, "down", False))
    seen: list[int] = []
    clock.at(t0 + 4_000, lambda: seen.append(offsets.load(1)))
    with caplog.at_level(logging.WARNING, logger="clepsydra_scheduler.delivery"):
        report = delivery(1, backoff_s=2.0).run()
    assert seen == [3]  # during the outage progress stood at the failed entry
    assert store.bodies() == ["m0", "m1", "m2", "m3", "m4"]
    assert report.store_failures >= 2
    late = store.delivered[3].arrival_ms - store.delivered[3].deliver_ts
    assert 4_500 <= late <= 6_600  # retried after the outage, within one back-off
    assert any("store call failed level=1 queue_offset=3" in r.getMessage()
               for r in caplog.records)


def test_a_run_that_moved_nothing_says_so_at_debug_only(
        clock: FakeClock, store: FakeStore, delivery: Make,
        caplog: pytest.LogCaptureFixture) -> None:
    # an idle level's run (one a minute per level) writes nothing at INFO; a run
    # that delivered something still reports at INFO
    def finished(level: int) -> list[int]:
        return [r.levelno for r in caplog.records
                if r.getMessage().startswith(f"run finished level={level} ")]

    with caplog.at_level(logging.DEBUG, logger="clepsydra_scheduler.delivery"):
        delivery(2, run_s=1.0).run()
        store.park(1, "m", deliver_ts=clock.now - 1)
        delivery(1, run_s=1.0).run()
    assert finished(2) == [logging.DEBUG]
    assert finished(1) == [logging.INFO]


def test_store_500s_are_retried_without_skipping(
        clock: FakeClock, store: FakeStore, delivery: Make) -> None:
    # SPEC D6
    for i in range(10):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    store.fail_calls = 3
    delivery(1, backoff_s=0.5, run_s=5.0).run()
    assert store.bodies() == [f"m{i}" for i in range(10)]


@pytest.mark.parametrize(("saved", "expected"), [(-5, 4), (2, 4), (7, 4), (50, 4)])
def test_progress_outside_the_queue_is_corrected_and_logged(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make,
        caplog: pytest.LogCaptureFixture, saved: int, expected: int) -> None:
    # SPEC D8: below the minimum -> minimum; logged. Ahead of the store's handed-over mark
    # (inside the queue or past its end) -> back to the entry after the mark (D9):
    # nothing is skipped
    for i in range(10):
        store.park(2, f"m{i}", deliver_ts=clock.now + 60_000)  # far, and "corrected" to due
    store.set_min_offset(2, 4)
    offsets.offsets[2] = saved
    with caplog.at_level(logging.WARNING, logger="clepsydra_scheduler.delivery"):
        report = delivery(2, run_s=0.2).run()
    assert report.corrections[0] == (saved, expected)
    words = ("below the queue minimum" if saved < 4 else "above the queue maximum"
             if saved > 10 else "ahead of the store's handed-over mark")
    line = next(r.getMessage() for r in caplog.records if words in r.getMessage())
    assert f"level=2 progress={saved}" in line and str(expected) in line
    assert store.bodies() == [f"m{i}" for i in range(4, 10)]
    assert offsets.load(2) == 10


def test_entries_already_handed_over_are_not_asked_for_again(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D9: a crash after the store's append but before progress was saved
    for i in range(6):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    store.handover(1, 0, 4)  # a previous run handed over 0..3, then died
    assert offsets.load(1) == 0
    report = delivery(1, run_s=0.2).run()
    assert store.bodies() == [f"m{i}" for i in range(6)]  # each exactly once
    assert report.skipped == 0
    assert offsets.load(1) == 6


def test_progress_ahead_of_a_recovered_store_steps_back(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D9: the store came back from a machine crash with its last hand-over
    # copies lost and its mark re-derived; Redis progress, saved after them, is ahead
    for i in range(8):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    first = delivery(1, run_s=0.2).run()
    assert first.delivered == 8 and offsets.load(1) == 8
    store.lose_last_handovers(1, 3)
    assert store.bodies() == [f"m{i}" for i in range(5)]
    report = delivery(1, run_s=0.2).run(first.token)  # the next run adopts the lease
    assert report.corrections[0] == (8, 5)
    assert sorted(store.bodies()) == [f"m{i}" for i in range(8)]  # each exactly once
    assert offsets.load(1) == 8


def test_replayed_range_writes_nothing_twice(clock: FakeClock, store: FakeStore) -> None:
    # SPEC D9, the store's side (as the fake mirrors it)
    for i in range(4):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    first = store.handover(1, 0, 4)
    again = store.handover(1, 0, 4)
    assert (first.delivered, again.delivered, again.skipped) == (4, 0, 4)


def test_unbuildable_message_is_parked_and_progress_moves_on(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D7 (the store parks; the scheduler moves on and counts it)
    store.park(1, "bad", deliver_ts=clock.now - 1, real_topic=None)
    store.park(1, "good", deliver_ts=clock.now - 1)
    report = delivery(1, run_s=0.2).run()
    assert [p.body for p in store.parked] == ["bad"]
    assert store.bodies() == ["good"]
    assert report.parked == 1 and offsets.load(1) == 2
    assert offsets.read_stats(1).parked == 1


def test_a_held_lease_makes_the_run_return_at_once(
        store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D1: one deliverer per level
    assert offsets.acquire(1, WorkerIdentity("pod-b/worker", offsets.incarnation()), 10_000)
    report = delivery(1).run()
    assert report.outcome is RunOutcome.NOT_ACQUIRED
    assert store.calls == []


def test_losing_the_lease_stops_the_run_without_saving_progress(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # fencing: after another run took the lease, this one writes no progress
    t0 = clock.now
    for i in range(20):
        store.park(1, f"m{i}", deliver_ts=t0 + 100 * i)

    def steal() -> None:
        offsets.leases[1] = ("thief", t0 + 100_000)
        offsets.offsets[1] = 7

    clock.at(t0 + 1_050, steal)
    report = delivery(1).run()
    assert report.outcome is RunOutcome.LEASE_LOST
    assert offsets.load(1) == 7
    assert offsets.holder(1) == "thief"


def test_run_end_keeps_the_lease_for_the_successor(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    first = delivery(1, run_s=1.0).run()
    assert first.outcome is RunOutcome.RUN_ENDED
    assert offsets.holder(1) == first.token
    # a keep-alive without the token is refused; the chained successor adopts the lease
    assert delivery(1, run_s=0.1).run().outcome is RunOutcome.NOT_ACQUIRED
    second = delivery(1, run_s=0.5).run(first.token)
    assert second.outcome is RunOutcome.RUN_ENDED


def test_stopping_releases_the_lease(
        clock: FakeClock, offsets: MemoryLevelState, delivery: Make) -> None:
    clock.stop_at_ms = clock.now + 500
    report = delivery(1, run_s=60.0).run()
    assert report.outcome is RunOutcome.STOPPED
    assert offsets.holder(1) is None


def test_empty_queue_wakes_at_least_every_poll_interval(
        clock: FakeClock, store: FakeStore, delivery: Make) -> None:
    # an entry stored while the queue is idle is still delivered on time
    t0 = clock.now
    clock.at(t0 + 2_345, lambda: store.park(1, "late-arrival"))
    delivery(1, poll_ms=200, run_s=6.0).run()
    d = store.delivered[0]
    assert d.arrival_ms - d.deliver_ts <= 1
    idle_waits = [w for w in clock.waits if w > 0]
    assert max(idle_waits) <= 1.0  # lease renewal cap (lease 3 s / 3)
    reads = [c for c in store.calls if c[0] == "entries"]
    assert len(reads) >= 20  # ~every 200 ms while idle


def test_redis_outage_shorter_than_the_lease_is_ridden_out(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    t0 = clock.now
    for i in range(4):
        store.park(1, f"m{i}", deliver_ts=t0 + 1_000 * i)
    clock.at(t0 + 500, lambda: setattr(offsets, "down", True))
    clock.at(t0 + 1_500, lambda: setattr(offsets, "down", False))
    report = delivery(1, lease_ms=3_000, run_s=5.0).run()
    assert report.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == ["m0", "m1", "m2", "m3"]
    assert offsets.load(1) == 4


def test_redis_outage_longer_than_the_lease_ends_the_run(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    clock.at(clock.now + 100, lambda: setattr(offsets, "down", True))
    report = delivery(1, lease_ms=3_000, run_s=30.0).run()
    assert report.outcome is RunOutcome.LEASE_LOST


def test_a_chained_run_started_while_redis_is_away_waits_for_it(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # DEC-scheduler-chain-rides-out: the run handed the token (the broker away, it runs on in
    # the task before) finds Redis down; it tries again until Redis answers, not leaving the
    # level until its lease expires and a keep-alive comes
    first = delivery(1, run_s=1.0).run()
    assert first.outcome is RunOutcome.RUN_ENDED
    t0 = clock.now
    store.park(1, "m0", deliver_ts=t0 + 500)
    offsets.down = True
    clock.at(t0 + 1_300, lambda: setattr(offsets, "down", False))
    second = delivery(1, run_s=3.0, redis_retry_s=0.5).run(first.token)
    assert second.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == ["m0"]
    assert store.delivered[0].arrival_ms <= t0 + 1_300 + 500  # Redis back, one retry at most


def test_a_chained_run_whose_lease_answer_was_lost_gets_the_lease_it_took(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # Redis ran the take and went away before it answered: the try again (the same run id)
    # finds the lease its own first try took and carries on with it, instead of finding the
    # level held and leaving it until the lease expires
    first = delivery(1, run_s=1.0).run()
    t0 = clock.now
    store.park(1, "m0", deliver_ts=t0 + 500)
    offsets.answers_lost = 1
    second = delivery(1, run_s=3.0, redis_retry_s=0.5).run(first.token)
    assert offsets.answers_lost == 0  # the first try was made, and its answer lost
    assert second.outcome is RunOutcome.RUN_ENDED
    assert store.bodies() == ["m0"]
    assert store.delivered[0].arrival_ms <= t0 + 500 + 500  # not the lease's 3 s later
    assert (fence_of(second.token) or 0) == (fence_of(first.token) or 0) + 1  # taken once


def test_a_keep_alive_started_while_redis_is_away_gives_up_at_once(
        clock: FakeClock, offsets: MemoryLevelState, delivery: Make) -> None:
    # no token: the next keep-alive tries again (a task per keep-alive must not wait here)
    offsets.down = True
    assert delivery(1).run().outcome is RunOutcome.NOT_ACQUIRED
    assert clock.waits == []


def test_a_chained_run_gives_up_once_redis_was_away_a_whole_lease(
        clock: FakeClock, offsets: MemoryLevelState, delivery: Make) -> None:
    first = delivery(1, run_s=1.0).run()
    offsets.down = True
    t0 = clock.now
    report = delivery(1, lease_ms=3_000, redis_retry_s=0.5).run(first.token)
    assert report.outcome is RunOutcome.NOT_ACQUIRED
    assert 3_000 <= clock.now - t0 <= 3_500


def test_statistics_are_recorded_per_level(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D10: delivered count, lateness histogram, backlog, lag
    t0 = clock.now
    for i in range(30):
        store.park(1, f"m{i}", deliver_ts=t0 - 50)
    store.park(1, "future", deliver_ts=t0 + 900_000)  # corrected: due now
    store.park(1, "soon", deliver_ts=t0 + 600)
    delivery(1, run_s=0.3, batch=10).run()
    stats = offsets.read_stats(1)
    assert stats.delivered == 31
    assert stats.lateness_count == 31
    assert sum(stats.buckets) == 31
    assert stats.lateness_max_ms == 50
    assert stats.backlog == 1  # "soon" is not handed over yet
    assert stats.lag_ms == 0
    p50 = stats.percentile_ms(0.5)
    assert p50 is not None and 20 <= p50 <= 50


def test_each_handover_carries_the_delivery_span_context(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState) -> None:
    # SPEC O1: the store's spans become children of scheduler.deliver (traceparent header)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store.park(1, "m0", deliver_ts=clock.now - 1)
    cfg = DeliveryConfig(level=1, delay_ms=1_000, run_s=0.1)
    LevelDelivery(cfg, store, offsets, clock, worker=WorkerIdentity("w", 1),
                  tracer=provider.get_tracer("test")).run()
    spans = [s for s in exporter.get_finished_spans() if s.name == "scheduler.deliver"]
    assert len(spans) == 1
    attrs = spans[0].attributes or {}
    assert attrs["clepsydra.delay_level"] == 1
    assert attrs["clepsydra.from_offset"] == 0
    assert attrs["clepsydra.next_offset"] == 1
    ctx = spans[0].get_span_context()
    assert ctx is not None
    traceparent = store.handover_headers[0]["traceparent"]
    assert traceparent.split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]


class _CommitFailsOnce(MemoryLevelState):
    """Redis drops the connection during one progress save."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock.now_ms)
        self.failures = 1

    def commit(self, level: int, token: str, queue_offset: int, sample: LevelSample) -> bool:
        if self.failures:
            self.failures -= 1
            raise LevelStateUnavailable("connection reset")
        return super().commit(level, token, queue_offset, sample)


def test_progress_unsaved_by_a_redis_blip_is_saved_after_the_next_renewal(
        clock: FakeClock, store: FakeStore) -> None:
    offsets = _CommitFailsOnce(clock)
    for i in range(3):
        store.park(1, f"m{i}", deliver_ts=clock.now - 1)
    store.park(1, "m3", deliver_ts=clock.now + 800)
    cfg = DeliveryConfig(level=1, delay_ms=1_000, run_s=1.0, lease_ms=3_000, poll_ms=200)
    seen: list[int] = []
    clock.at(clock.now + 600, lambda: seen.append(offsets.load(1)))
    LevelDelivery(cfg, store, offsets, clock, worker=WorkerIdentity("w", 1)).run()
    assert seen == [3]  # saved after the blip, before m3 fell due
    assert store.bodies() == ["m0", "m1", "m2", "m3"]
    handovers = [c for c in store.calls if c[0] == "handover"]
    assert handovers == [("handover", 1, 0, 3), ("handover", 1, 3, 1)]  # no stale replay
    assert offsets.load(1) == 4


def test_backlog_gauge_follows_entries_stored_behind_a_waiting_head(
        clock: FakeClock, offsets: MemoryLevelState) -> None:
    # SPEC D10: backlog = maxOffset - handedOver - 1, while the run sleeps on its head
    store = FakeStore([60_000], clock.now_ms)
    store.park(1, "head")
    clock.at(clock.now + 1_000, lambda: [store.park(1, f"m{i}") for i in range(10)])
    cfg = DeliveryConfig(level=1, delay_ms=60_000, run_s=8.0, lease_ms=3_000)
    LevelDelivery(cfg, store, offsets, clock, worker=WorkerIdentity("w", 1)).run()
    assert offsets.read_stats(1).backlog == 11
    assert store.delivered == []


def test_lag_gauge_grows_while_the_store_is_down(
        clock: FakeClock, store: FakeStore, offsets: MemoryLevelState, delivery: Make) -> None:
    # SPEC D10: lag = now - deliverTs of the oldest due entry not handed over
    store.park(1, "m0", deliver_ts=clock.now + 500)
    store.park(1, "m1", deliver_ts=clock.now + 600)
    clock.at(clock.now + 100, lambda: setattr(store, "down", True))
    delivery(1, backoff_s=1.0, run_s=4.0).run()
    assert store.delivered == []
    assert 2_000 <= offsets.read_stats(1).lag_ms <= 4_000
