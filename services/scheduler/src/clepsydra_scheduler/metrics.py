"""SPEC D10 / O2: per-level delivery figures, gathered from Redis (the statistics every worker
records) and, when it answers, the store (queue range, handed-over mark, the oldest due entry),
exported in Prometheus text and printed as the status table.

The worker serves them on ``CLEPSYDRA_SCHEDULER_METRICS_PORT`` (a prometheus_client HTTP
server with :class:`SchedulerCollector`); ``python -m clepsydra_scheduler status --prometheus``
renders the same text once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from clepsydra_core.levels import DelayLevels, format_delay
from clepsydra_core.schedule_rules import corrected_deliver_ts
from clepsydra_core.wire.schedule import LevelInfo
from clepsydra_scheduler.ports import HandoverApi, StoreCallFailed
from clepsydra_scheduler.stats import LATENESS_BUCKETS_MS, LevelStats

logger = logging.getLogger(__name__)


class StatsSource(Protocol):
    """What the figures are read from (RedisLevelState, or its in-memory twin)."""

    def read_stats(self, level: int) -> LevelStats: ...

    def load(self, level: int) -> int: ...

    def holder(self, level: int) -> str | None: ...


@dataclass(frozen=True, slots=True)
class LevelRow:
    level: int
    delay_ms: int
    stats: LevelStats
    progress: int
    leased: bool
    store: LevelInfo | None
    """None when the store did not answer (figures then come from the recorded gauges)."""
    lag_ms: int

    @property
    def min_offset(self) -> int:
        return self.store.min_offset if self.store else self.stats.min_offset

    @property
    def max_offset(self) -> int:
        return self.store.max_offset if self.store else self.stats.max_offset

    @property
    def handed_over(self) -> int:
        return self.store.handed_over if self.store else self.stats.handed_over

    @property
    def backlog(self) -> int:
        if self.store is None:
            return self.stats.backlog
        return max(self.store.max_offset - max(self.store.handed_over, self.store.min_offset - 1)
                   - 1, 0)


def gather(levels: DelayLevels, state: StatsSource, store: HandoverApi | None,
           now_ms: int) -> list[LevelRow]:
    """One row per level of the table."""
    infos: dict[int, LevelInfo] = {}
    if store is not None:
        try:
            infos = {info.level: info for info in store.levels()}
        except StoreCallFailed as exc:
            logger.warning("store did not answer; showing recorded figures: %s", exc.message)
            store = None
    rows = []
    for level in levels.levels():
        stats = state.read_stats(level)
        info = infos.get(level)
        lag_ms = stats.lag_ms
        if store is not None and info is not None:
            lag_ms = _live_lag(store, info, levels.delay_ms(level), now_ms)
        rows.append(LevelRow(level=level, delay_ms=levels.delay_ms(level), stats=stats,
                             progress=state.load(level), leased=state.holder(level) is not None,
                             store=info, lag_ms=lag_ms))
    return rows


def _live_lag(store: HandoverApi, info: LevelInfo, delay_ms: int, now_ms: int) -> int:
    """now - deliverTs of the oldest entry not yet handed over, if it is due (else 0)."""
    if not info.backlog:
        return 0
    try:
        entries = store.entries(info.level, info.first_pending, 1)
    except StoreCallFailed:
        return 0
    if not entries.deliver_ts:
        return 0
    return max(now_ms - corrected_deliver_ts(entries.deliver_ts[0], now_ms, delay_ms), 0)


class SchedulerCollector(Collector):
    """Prometheus families for every level, read fresh on each scrape."""

    def __init__(self, rows: Callable[[], list[LevelRow]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[Metric]:
        rows = self._rows()
        label = ["level"]
        delivered = CounterMetricFamily("clepsydra_scheduler_delivered",
                                        "Scheduled messages handed to their real topic",
                                        labels=label)
        parked = CounterMetricFamily("clepsydra_scheduler_parked",
                                     "Scheduled messages parked in %SCHEDULE_ERROR% (D7)",
                                     labels=label)
        skipped = CounterMetricFamily("clepsydra_scheduler_skipped",
                                      "Entries a replay found already handed over (D9)",
                                      labels=label)
        lateness = HistogramMetricFamily("clepsydra_scheduler_lateness_seconds",
                                         "Arrival in the real topic minus deliver time",
                                         labels=label)
        backlog = GaugeMetricFamily("clepsydra_scheduler_backlog",
                                    "Schedule entries not yet handed over", labels=label)
        lag = GaugeMetricFamily("clepsydra_scheduler_lag_seconds",
                                "now - deliver time of the oldest due entry not handed over",
                                labels=label)
        progress = GaugeMetricFamily("clepsydra_scheduler_progress_offset",
                                     "Saved progress (schedule queue offset)", labels=label)
        for row in rows:
            lv = [str(row.level)]
            delivered.add_metric(lv, row.stats.delivered)
            parked.add_metric(lv, row.stats.parked)
            skipped.add_metric(lv, row.stats.skipped)
            cumulative, buckets = 0, []
            for bound, count in zip([*LATENESS_BUCKETS_MS, None], row.stats.buckets, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound is None else str(bound / 1_000), cumulative))
            lateness.add_metric(lv, buckets, row.stats.lateness_sum_ms / 1_000)
            backlog.add_metric(lv, row.backlog)
            lag.add_metric(lv, row.lag_ms / 1_000)
            progress.add_metric(lv, row.progress)
        yield from (delivered, parked, skipped, lateness, backlog, lag, progress)


def prometheus_text(rows: list[LevelRow]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(lambda: rows))
    return generate_latest(registry).decode()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def status_table(rows: list[LevelRow], *, store_up: bool) -> str:
    header = ("level", "delay", "min", "max", "handedOver", "progress", "backlog", "lag_ms",
              "delivered", "parked", "p50_ms", "p99_ms", "max_ms", "lease")
    lines = [header]
    for row in rows:
        lines.append((
            str(row.level), format_delay(row.delay_ms), str(row.min_offset), str(row.max_offset),
            str(row.handed_over), str(row.progress), str(row.backlog), str(row.lag_ms),
            str(row.stats.delivered), str(row.stats.parked),
            _ms(row.stats.percentile_ms(0.50)), _ms(row.stats.percentile_ms(0.99)),
            "-" if row.stats.lateness_max_ms < 0 else str(row.stats.lateness_max_ms),
            "held" if row.leased else "free",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True))
           for line in lines]
    if not store_up:
        out.append("(store did not answer: queue figures are the last ones recorded)")
    return "\n".join(out)
