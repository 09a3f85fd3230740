"""Counters and a request histogram kept per thread, summed when ``/metrics`` is read
(DEC-thread-metrics).

prometheus_client's ``Counter.inc`` and ``Histogram.observe`` take a lock and make four or five
Python calls each (0.3 and 0.7 us here); a single produce made six of them. Here each thread
adds to cells of its own (plain lists: no other thread writes them, so no lock) and the scrape
sums every thread's cells; the exposition is the one prometheus_client gives for the same
values (``tests/unit/store/test_thread_metrics.py`` compares them).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class ThreadCounter(Collector):
    """A counter without labels (exposed as ``<name>_total``)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self._local = threading.local()
        self._cells: list[list[float]] = []
        """Every thread's cell (appended once per thread: ``list.append`` is atomic)."""

    def inc(self, amount: float = 1) -> None:
        try:
            self._local.cell[0] += amount
        except AttributeError:  # this thread's first
            cell = [amount]
            self._local.cell = cell
            self._cells.append(cell)

    def value(self) -> float:
        return float(sum(cell[0] for cell in list(self._cells)))

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value())


class RequestMetrics(Collector):
    """Requests by (operation, status) and their duration by operation: a counter
    ``<requests>_total{operation,status}`` and a histogram ``<seconds>{operation}``."""

    def __init__(self, requests: tuple[str, str], seconds: tuple[str, str],
                 buckets: Sequence[float]) -> None:
        self.requests = requests
        """(name, documentation) of the counter."""
        self.seconds = seconds
        """(name, documentation) of the histogram."""
        self.bounds = tuple(float(b) for b in buckets)
        self._local = threading.local()
        self._tables: list[dict[tuple[str, int], list[float]]] = []
        """Every thread's rows: (operation, status) -> [count, sum, per bucket..., +Inf]."""

    def observe(self, operation: str, status: int, seconds: float) -> None:
        try:
            rows = self._local.rows
        except AttributeError:  # this thread's first
            rows = self._local.rows = {}
            self._tables.append(rows)
        row = rows.get((operation, status))
        if row is None:
            row = rows[(operation, status)] = [0.0] * (len(self.bounds) + 3)
        row[0] += 1
        row[1] += seconds
        row[2 + bisect.bisect_left(self.bounds, seconds)] += 1

    def totals(self) -> dict[tuple[str, int], list[float]]:
        """Every thread's rows summed."""
        out: dict[tuple[str, int], list[float]] = {}
        for table in list(self._tables):
            for key, row in list(table.items()):
                total = out.get(key)
                if total is None:
                    out[key] = list(row)
                else:
                    for i, value in enumerate(row):
                        total[i] += value
        return out

    def collect(self) -> Iterator[Metric]:
        totals = self.totals()
        counts = CounterMetricFamily(*self.requests, labels=["operation", "status"])
        by_operation: dict[str, list[float]] = {}
        for (operation, status), row in sorted(totals.items()):
            counts.add_metric([operation, str(status)], row[0])
            merged = by_operation.setdefault(operation, [0.0] * len(row))
            for i, value in enumerate(row):
                merged[i] += value
        yield counts
        durations = HistogramMetricFamily(*self.seconds, labels=["operation"])
        for operation, row in sorted(by_operation.items()):
            durations.add_metric([operation], cumulative_buckets(self.bounds, row[2:]), row[1])
        yield durations


def cumulative_buckets(bounds: Sequence[float], counts: Sequence[float]
                       ) -> list[tuple[str, float]]:
    """A histogram's ``(le, count at or below)`` pairs from its count per bucket (the last one
    +Inf), labelled as prometheus_client labels its own."""
    running, out = 0.0, []
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        running += count
        out.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
    return out
