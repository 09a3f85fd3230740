"""Per-level delivery statistics (SPEC D10) as kept in Redis: one hash per level
(``naming.delay_stats_key(level)``), shared by every worker and read by the status command and
the Prometheus exporter.

Fields: counters ``delivered``, ``parked``, ``skipped``, ``handovers``, ``lateness_sum_ms``,
``lateness_count``, ``lateness_max_ms`` and one ``lat_le_<bound>`` per histogram bucket
(non-cumulative counts; ``lat_le_inf`` the overflow); gauges ``backlog``, ``lag_ms``,
``min_offset``, ``max_offset``, ``handed_over``, ``updated_ms``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from clepsydra_scheduler.ports import LevelSample

LATENESS_BUCKETS_MS: tuple[int, ...] = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
)
"""Upper bounds (inclusive, ms) of the lateness histogram; above the last goes to ``inf``."""

GAUGES = ("backlog", "lag_ms", "min_offset", "max_offset", "handed_over", "updated_ms")


def bucket_field(bound: int | None) -> str:
    return "lat_le_inf" if bound is None else f"lat_le_{bound}"


def lateness_counts(lateness_ms: Iterable[int]) -> dict[str, int]:
    """Histogram field -> count for a batch of lateness values (negatives count as 0)."""
    counts: Counter[str] = Counter()
    for value in lateness_ms:
        index = bisect.bisect_left(LATENESS_BUCKETS_MS, max(value, 0))
        bound = LATENESS_BUCKETS_MS[index] if index < len(LATENESS_BUCKETS_MS) else None
        counts[bucket_field(bound)] += 1
    return dict(counts)


def increments(sample: LevelSample) -> dict[str, int]:
    """The counter fields a sample adds to (only the non-zero ones)."""
    lateness = list(sample.lateness_ms)
    out = {
        "delivered": sample.delivered,
        "parked": sample.parked,
        "skipped": sample.skipped,
        "handovers": 1 if (sample.delivered or sample.parked or sample.skipped) else 0,
        "lateness_sum_ms": sum(max(v, 0) for v in lateness),
        "lateness_count": len(lateness),
        **lateness_counts(lateness),
    }
    return {k: v for k, v in out.items() if v}


def gauges(sample: LevelSample) -> dict[str, int]:
    return {
        "backlog": sample.backlog,
        "lag_ms": sample.lag_ms,
        "min_offset": sample.min_offset,
        "max_offset": sample.max_offset,
        "handed_over": sample.handed_over,
        "updated_ms": sample.now_ms,
    }


def max_lateness(sample: LevelSample) -> int:
    return max(sample.lateness_ms, default=-1)


@dataclass(frozen=True, slots=True)
class LevelStats:
    """A level's statistics as read back from its hash."""

    level: int
    delivered: int = 0
    parked: int = 0
    skipped: int = 0
    handovers: int = 0
    lateness_sum_ms: int = 0
    lateness_count: int = 0
    lateness_max_ms: int = -1
    buckets: tuple[int, ...] = field(default=(0,) * (len(LATENESS_BUCKETS_MS) + 1))
    """Non-cumulative counts per bucket of LATENESS_BUCKETS_MS, then the overflow."""
    backlog: int = 0
    lag_ms: int = 0
    min_offset: int = 0
    max_offset: int = 0
    handed_over: int = -1
    updated_ms: int = 0

    @classmethod
    def from_hash(cls, level: int, raw: Mapping[str, str]) -> LevelStats:
        def num(name: str, default: int = 0) -> int:
            try:
                return int(raw.get(name, default))
            except ValueError:
                return default

        bounds: list[int | None] = [*LATENESS_BUCKETS_MS, None]
        return cls(
            level=level,
            delivered=num("delivered"),
            parked=num("parked"),
            skipped=num("skipped"),
            handovers=num("handovers"),
            lateness_sum_ms=num("lateness_sum_ms"),
            lateness_count=num("lateness_count"),
            lateness_max_ms=num("lateness_max_ms", -1),
            buckets=tuple(num(bucket_field(b)) for b in bounds),
            backlog=num("backlog"),
            lag_ms=num("lag_ms"),
            min_offset=num("min_offset"),
            max_offset=num("max_offset"),
            handed_over=num("handed_over", -1),
            updated_ms=num("updated_ms"),
        )

    def percentile_ms(self, q: float) -> float | None:
        """Lateness quantile estimated from the histogram (linear within a bucket; the
        overflow bucket answers with the largest lateness seen). None when empty."""
        total = sum(self.buckets)
        if total == 0:
            return None
        rank = q * total
        seen = 0
        lower = 0.0
        for index, count in enumerate(self.buckets):
            if index == len(LATENESS_BUCKETS_MS):
                return float(max(self.lateness_max_ms, LATENESS_BUCKETS_MS[-1]))
            upper = float(LATENESS_BUCKETS_MS[index])
            if count and seen + count >= rank:
                estimate = lower + (upper - lower) * (rank - seen) / count
                return min(estimate, float(self.lateness_max_ms)) if self.lateness_max_ms >= 0 \
                    else estimate
            seen += count
            lower = upper
        return None  # pragma: no cover - the loop always returns
