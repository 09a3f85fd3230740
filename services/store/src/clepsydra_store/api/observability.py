"""Spans and metrics of the HTTP layer (SPEC O1, O2).

Every request that carries messages is one span named ``store.<operation>``, a child of the
caller's W3C ``traceparent`` header when it sends one (clepsydra_web.tracing, shared by every
HTTP service), started by the envelope of the route (``envelope.py``, by the route table's
trace modes); ops routes, the level table and empty pulls make none.

Metrics live in a private Prometheus registry: request counts and latency by operation, produced
messages and bytes, scheduler hand-over counts and lateness per level (D10), and, read at scrape
time, the engine's ``stats()``, per-level schedule backlog and lag, and live consumers.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from clepsydra_core import naming
from clepsydra_core.levels import DelayLevels
from clepsydra_core.runtime import telemetry
from clepsydra_core.schedule_rules import first_pending
from clepsydra_store.api.thread_metrics import RequestMetrics, ThreadCounter, cumulative_buckets
from clepsydra_web.tracing import ServerScope, ServerTracing

RequestScope = ServerScope

if TYPE_CHECKING:
    from clepsydra_store.consumers import ConsumerRegistry
    from clepsydra_store.engine.message_store import MessageStore

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
_LATENESS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000)
_METRIC_NAME = re.compile(r"[^a-zA-Z0-9_]")
_PER_LEVEL = re.compile(r"^(.+)_level_(\d+)$")

DESTINATION = telemetry.DESTINATION
MESSAGE_ID = telemetry.MESSAGE_ID
BATCH_COUNT = telemetry.BATCH_COUNT
def set_attribute(key: str, value: str | int | bool) -> None:
    trace.get_current_span().set_attribute(key, value)


class Observability:
    """The tracer and the metrics of one app."""

    def __init__(self, store: MessageStore, levels: DelayLevels,
                 consumers: ConsumerRegistry, *, enveloped: frozenset[str] = frozenset()
                 ) -> None:
        """``enveloped``: the endpoints whose views trace themselves (``envelope.py``, by the
        route table's trace modes); Flask's hooks trace the rest (an unknown route, a wrong
        method; the ops routes are untraced)."""
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series
        self.tracing = ServerTracing("store", self_traced=enveloped)
        self.tracer = self.tracing.tracer
        self.registry = CollectorRegistry(auto_describe=False)
        # the per-request metrics are kept per thread (DEC-thread-metrics): no lock a request
        self.requests = RequestMetrics(
            ("clepsydra_store_requests", "HTTP requests by operation and status"),
            ("clepsydra_store_request_seconds", "HTTP request duration by operation"),
            _LATENCY_BUCKETS)
        self.produced = ThreadCounter("clepsydra_store_produced_messages", "Messages "
                                      "acknowledged to producers over HTTP")
        self.poller_answered = ThreadCounter("clepsydra_store_poller_answered_requests",
                                             "Requests the worker's poller thread answered "
                                             "itself: produces (DEC-poller-produce) and pulls "
                                             "that could not wait (DEC-poller-pull)")
        self.poller_spun = ThreadCounter("clepsydra_store_poller_spin_caught_requests",
                                         "Events (a producer's next request, mostly) the "
                                         "worker's poller found while it spun after answering "
                                         "a produce (CLEPSYDRA_STORE_POLLER_SPIN_US, "
                                         "DEC-poller-spin)")
        self.produced_bytes = ThreadCounter("clepsydra_store_produced_body_bytes", "Body bytes "
                                            "acknowledged to producers over HTTP")
        for collector in (self.requests, self.produced, self.poller_answered, self.poller_spun,
                          self.produced_bytes):
            self.registry.register(collector)
        self.delivered = Counter("clepsydra_store_schedule_delivered", "Scheduled messages "
                                 "handed over to their real topic (D4)", ["level"],
                                 registry=self.registry)
        self.parked = Counter("clepsydra_store_schedule_parked", "Scheduled messages parked in "
                              "%SCHEDULE_ERROR% (D7)", ["level"], registry=self.registry)
        self.lateness = BatchHistogram("clepsydra_store_schedule_lateness_ms", "Arrival in "
                                       "the real topic minus deliver time, ms (D10)", "level",
                                       _LATENESS_BUCKETS_MS)
        self.registry.register(self.lateness)
        self.registry.register(EngineCollector(store, levels, consumers))

    def begin(self, operation: str, environ: Mapping[str, Any],
              parent: otel_context.Context | str | None = None, *,
              traced: bool = True, current: bool = True) -> RequestScope:
        """Start the request's span and make it current (``current``: ServerTracing.begin)."""
        return self.tracing.begin(operation, environ, parent, traced=traced, current=current)

    def end(self, scope: RequestScope, status: int) -> None:
        """End the span, count the request."""
        self.tracing.end(scope, status)
        self.count(scope, status)

    def count(self, scope: RequestScope, status: int) -> None:
        """Count a request and its latency (every request, traced or not)."""
        self.requests.observe(scope.operation, status, time.perf_counter() - scope.started)


class BatchHistogram(Collector):
    """A one-label Prometheus histogram fed a batch of values at a time: a hand-over reports
    up to 10,000 lateness values, and ``Histogram.observe`` costs ~2 us each (10 % of a
    drain's CPU); here a batch is one lock and a ``bisect`` per value."""

    def __init__(self, name: str, documentation: str, label: str,
                 buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.bounds = tuple(float(b) for b in buckets)
        self._lock = threading.Lock()
        self._series: dict[str, tuple[list[int], list[float]]] = {}
        """label value -> (count per bucket, the last one +Inf; [sum])."""

    def observe_many(self, label_value: str, values: list[int]) -> None:
        if not values:
            return
        find, bounds = bisect.bisect_left, self.bounds
        with self._lock:
            series = self._series.get(label_value)
            if series is None:
                series = self._series[label_value] = ([0] * (len(bounds) + 1), [0.0])
            counts, total = series
            for value in values:
                counts[find(bounds, value)] += 1
            total[0] += sum(values)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        with self._lock:
            snapshot = [(k, list(c), t[0]) for k, (c, t) in sorted(self._series.items())]
        for label_value, counts, total in snapshot:
            family.add_metric([label_value], cumulative_buckets(self.bounds, counts), total)
        yield family


class EngineCollector(Collector):
    """Gauges read at scrape time: engine stats, schedule backlog and lag per level, consumers."""

    def __init__(self, store: MessageStore, levels: DelayLevels,
                 consumers: ConsumerRegistry) -> None:
        self._store = store
        self._levels = levels
        self._consumers = consumers

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self._store.stats()
        except Exception:
            logger.exception("metrics: engine stats failed")
            stats = {}
        per_level: dict[str, GaugeMetricFamily] = {}
        for key, value in sorted(stats.items()):
            match = _PER_LEVEL.match(key)
            if match is None:
                name = "clepsydra_store_engine_" + _METRIC_NAME.sub("_", key)
                yield GaugeMetricFamily(name, f"engine stat {key}", value=float(value))
                continue
            stem, level = match.groups()
            family = per_level.get(stem)
            if family is None:
                family = GaugeMetricFamily("clepsydra_store_engine_" + _METRIC_NAME.sub("_", stem),
                                           f"engine stat {stem}_level_<n>", labels=["level"])
                per_level[stem] = family
            family.add_metric([level], float(value))
        yield from per_level.values()
        yield from self._schedule()
        live = GaugeMetricFamily("clepsydra_store_consumers", "Live consumers per group",
                                 labels=["group"])
        for group, count in sorted(self._consumers.counts().items()):
            live.add_metric([group], count)
        yield live

    def _schedule(self) -> Iterator[Metric]:
        backlog = GaugeMetricFamily("clepsydra_store_schedule_backlog", "Schedule entries not "
                                    "yet handed over, per level", labels=["level"])
        lag = GaugeMetricFamily("clepsydra_store_schedule_lag_ms", "now minus the deliver time "
                                "of the oldest due entry not handed over, per level (O2)",
                                labels=["level"])
        now_ms = int(time.time() * 1000)
        try:
            topic = self._store.get_topic(naming.SCHEDULE_TOPIC)
            queues = {q.queue_id: q for q in topic.queues}
            for level in self._levels.levels():
                queue = queues.get(self._levels.queue_id(level))
                if queue is None:
                    continue
                head = self._store.schedule_entries(level, queue.min_offset, 1)
                first = first_pending(head.handed_over, queue.min_offset)
                backlog.add_metric([str(level)], max(0, queue.max_offset - first))
                waiting_ms = 0
                if first < queue.max_offset:
                    oldest = self._store.schedule_entries(level, first, 1).deliver_ts
                    if oldest and oldest[0] <= now_ms:
                        waiting_ms = now_ms - oldest[0]
                lag.add_metric([str(level)], waiting_ms)
        except Exception:
            logger.exception("metrics: schedule backlog failed")
        yield backlog
        yield lag
