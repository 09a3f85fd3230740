"""Per-level statistics, their Prometheus rendering and the status table (SPEC D10, O2)."""

from __future__ import annotations

from clepsydra_core.levels import DelayLevels
from clepsydra_core.wire.schedule import LevelInfo
from clepsydra_scheduler.level_state import MemoryLevelState
from clepsydra_scheduler.metrics import LevelRow, gather, prometheus_text, status_table
from clepsydra_scheduler.ports import LevelSample, WorkerIdentity
from clepsydra_scheduler.stats import LevelStats, lateness_counts
from tests.fixtures.scheduler import FakeClock, FakeStore


def test_lateness_goes_into_inclusive_buckets() -> None:
    assert lateness_counts([0, 1, 2, 3, 50, 51, 70_000, -4]) == {
        "lat_le_1": 3, "lat_le_2": 1, "lat_le_5": 1, "lat_le_50": 1, "lat_le_100": 1,
        "lat_le_inf": 1}


def test_percentiles_interpolate_within_a_bucket() -> None:
    offsets = MemoryLevelState(lambda: 0)
    offsets.commit(1, "t", 0, LevelSample(delivered=100, lateness_ms=[3] * 98 + [40, 45]))
    stats = offsets.read_stats(1)
    p50, p99 = stats.percentile_ms(0.5), stats.percentile_ms(0.99)
    assert p50 is not None and 2 < p50 <= 5
    assert p99 is not None and 20 < p99 <= 45
    assert LevelStats(level=1).percentile_ms(0.5) is None


def test_gather_reads_store_and_redis_and_computes_live_lag() -> None:
    clock = FakeClock()
    store = FakeStore([1_000, 2_000], clock.now_ms)
    for i in range(3):
        store.park(1, f"m{i}", deliver_ts=clock.now - 700 + i)
    store.handover(1, 0, 1)
    offsets = MemoryLevelState(clock.now_ms)
    token = offsets.acquire(1, WorkerIdentity("pod-a/worker", 1), 10_000)
    assert token is not None
    offsets.commit(1, token, 1, LevelSample(delivered=1, lateness_ms=[700], now_ms=clock.now))
    rows = gather(DelayLevels.parse("1s 2s"), offsets, store, clock.now)
    row = rows[0]
    assert (row.min_offset, row.max_offset, row.handed_over, row.progress) == (0, 3, 0, 1)
    assert row.backlog == 2 and row.lag_ms == 699 and row.leased
    assert rows[1].backlog == 0 and not rows[1].leased
    table = status_table(rows, store_up=True)
    assert table.splitlines()[0].split()[:6] == ["level", "delay", "min", "max", "handedOver",
                                                 "progress"]
    assert table.splitlines()[1].split()[:10] == ["1", "1s", "0", "3", "0", "1", "2", "699",
                                                  "1", "0"]


def test_prometheus_text_has_every_family_per_level() -> None:
    stats = LevelStats.from_hash(2, {"delivered": "5", "lat_le_10": "4", "lat_le_inf": "1",
                                     "lateness_sum_ms": "70030", "lateness_max_ms": "70000"})
    row = LevelRow(level=2, delay_ms=5_000, stats=stats, progress=9, leased=True,
                   store=LevelInfo(2, 5_000, 1, 0, 12, 8), lag_ms=250)
    text = prometheus_text([row])
    assert 'clepsydra_scheduler_delivered_total{level="2"} 5.0' in text
    assert 'clepsydra_scheduler_lateness_seconds_bucket{le="0.01",level="2"} 4.0' in text
    assert 'clepsydra_scheduler_lateness_seconds_bucket{le="+Inf",level="2"} 5.0' in text
    assert 'clepsydra_scheduler_lateness_seconds_count{level="2"} 5.0' in text
    assert 'clepsydra_scheduler_backlog{level="2"} 3.0' in text
    assert 'clepsydra_scheduler_lag_seconds{level="2"} 0.25' in text
    assert 'clepsydra_scheduler_progress_offset{level="2"} 9.0' in text
