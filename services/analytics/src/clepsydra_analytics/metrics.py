"""Prometheus metrics of the analytics service, computed at scrape time: export lag and rows
per topic (from the files and the store), report runs kept and the newest run's time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from clepsydra_analytics.reports import Reports
from clepsydra_analytics.settings import TopicPatterns
from clepsydra_analytics.status import export_status
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core.errors import ClepsydraError

if TYPE_CHECKING:
    from clepsydra_analytics.export_files import ExportFiles

logger = logging.getLogger(__name__)


class AnalyticsCollector(Collector):
    def __init__(self, files: Callable[[], ExportFiles], reader: StoreReader,
                 patterns: TopicPatterns,
                 reports: Reports) -> None:
        self.files = files
        self.reader = reader
        self.patterns = patterns
        self.reports = reports

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("clepsydra_analytics_export_lag_messages",
                                "Messages in the store not yet exported", labels=["topic"])
        rows = GaugeMetricFamily("clepsydra_analytics_exported_rows",
                                 "Rows in the export files", labels=["topic"])
        try:
            for t in export_status(self.files(), self.reader, self.patterns):
                lag.add_metric([t.topic], t.lag)
                rows.add_metric([t.topic], t.exported_rows)
        except ClepsydraError as exc:
            logger.warning("metrics: export status unavailable: %s", exc)
        yield lag
        yield rows
        runs = self.reports.runs()
        yield GaugeMetricFamily("clepsydra_analytics_report_runs", "Report runs kept",
                                value=len(runs))
        newest = GaugeMetricFamily("clepsydra_analytics_last_report_timestamp_seconds",
                                   "When the newest report run started")
        if runs:
            newest.add_metric([], runs[0].now_ms / 1000)
        yield newest


def build_registry(collector: AnalyticsCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry
