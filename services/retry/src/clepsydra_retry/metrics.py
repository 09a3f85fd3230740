"""Prometheus metrics (SPEC O2): send-backs by group and outcome, DLQ depth per group.

Counts live in Redis (``sendback_stats_key``) so every replica of this stateless service
reports the same totals; DLQ depth is asked of the store and the DLQ state at scrape time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from clepsydra_core.errors import ClepsydraError
from clepsydra_retry.dlq import DlqToolkit
from clepsydra_retry.groups import GroupStore

logger = logging.getLogger(__name__)

MAX_GROUPS_SCRAPED = 500
"""A scrape asks the store about at most this many groups (one call each)."""


class RetryCollector(Collector):
    def __init__(self, groups: GroupStore, dlq: DlqToolkit) -> None:
        self._groups = groups
        self._dlq = dlq

    def collect(self) -> Iterator[Metric]:
        send_backs = CounterMetricFamily(
            "clepsydra_retry_send_backs", "Send-backs by consumer group and outcome",
            labels=["group", "outcome"])
        depth = GaugeMetricFamily(
            "clepsydra_retry_dlq_depth", "Dead letters not yet resent or purged, per group",
            labels=["group"])
        try:
            names = self._groups.names()[:MAX_GROUPS_SCRAPED]
        except ClepsydraError:
            logger.warning("metrics: redis unavailable, no group metrics this scrape")
            names = []
        for group in names:
            try:
                for outcome, count in sorted(self._groups.send_back_counts(group).items()):
                    send_backs.add_metric([group, outcome], count)
                depth.add_metric([group], self._dlq.depth(group))
            except ClepsydraError as exc:
                logger.warning("metrics: group=%s skipped: %s", group, exc)
        yield send_backs
        yield depth


def build_registry(groups: GroupStore, dlq: DlqToolkit) -> tuple[CollectorRegistry, Histogram]:
    """A registry of this app's own (no process-global state, so tests can build many apps)."""
    registry = CollectorRegistry()
    registry.register(RetryCollector(groups, dlq))
    latency = Histogram("clepsydra_retry_request_seconds", "HTTP request latency by route",
                        ["route"], registry=registry)
    return registry, latency
