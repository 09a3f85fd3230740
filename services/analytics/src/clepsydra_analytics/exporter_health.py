"""The exporter's own /healthz and /metrics (Kubernetes probes it; Prometheus scrapes it), on
CLEPSYDRA_ANALYTICS_EXPORTER_PORT, served by a thread beside the export loop.

/healthz is 200 while the loop turns (a cycle ended, well or not, within the stale limit) and
503 when it is stuck; a store that does not answer is reported in the body but keeps it 200,
so a store outage does not get the exporter restarted. The standard library's HTTP server
answers them (clepsydra_core.runtime.health_http): no Flask in the exporter's process
(DEC-memory-at-rest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from clepsydra_analytics.export_shards import ShardedExporter
from clepsydra_analytics.exporter import Exporter
from clepsydra_core.runtime.health_http import JSON, HealthServer, Response, Routes

AnyExporter = Exporter | ShardedExporter
"""One store's exporter, or every shard's (export_shards.py)."""

STALE_MIN_S = 60.0


def stale_after_s(exporter: AnyExporter) -> float:
    return max(STALE_MIN_S, 10 * exporter.settings.poll_interval_s)


def health(exporter: AnyExporter) -> tuple[dict[str, Any], int]:
    now = exporter.clock_s()
    last = exporter.last_cycle_s
    age_s = None if last is None else now - last
    stuck = age_s is not None and age_s > stale_after_s(exporter)
    body = {"status": "stuck" if stuck else "ok", "lastCycleAgeS": age_s,
            "lastError": exporter.last_error, "rowsWritten": exporter.rows_written_total,
            "exportUri": exporter.settings.export_uri}
    return body, 503 if stuck else 200


class ExporterCollector(Collector):
    def __init__(self, exporter: AnyExporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        e = self.exporter
        yield CounterMetricFamily("clepsydra_analytics_exporter_rows",
                                  "Rows written to export files", value=e.rows_written_total)
        yield CounterMetricFamily("clepsydra_analytics_exporter_pulled_rows",
                                  "Rows pulled from the store (written or still buffered)",
                                  value=e.rows_pulled_total)
        lag = GaugeMetricFamily("clepsydra_analytics_exporter_lag_messages",
                                "Messages of the exported queues not pulled yet, as of the "
                                "last cycle")
        if e.lag_messages is not None:
            lag.add_metric([], e.lag_messages)
        yield lag
        yield CounterMetricFamily("clepsydra_analytics_exporter_cycle_failures",
                                  "Export cycles that failed (store away, write error)",
                                  value=e.cycle_failures)
        age = GaugeMetricFamily("clepsydra_analytics_exporter_last_cycle_age_seconds",
                                "Seconds since the last export cycle ended")
        if e.last_cycle_s is not None:
            age.add_metric([], e.clock_s() - e.last_cycle_s)
        yield age


def health_routes(exporter: AnyExporter) -> Routes:
    """``/healthz`` and ``/metrics`` of ``exporter``."""
    registry = CollectorRegistry()
    registry.register(ExporterCollector(exporter))

    def healthz() -> Response:
        body, status = health(exporter)
        return status, JSON, orjson.dumps(body)

    def metrics() -> Response:
        return 200, CONTENT_TYPE_LATEST, generate_latest(registry)

    return {"/healthz": healthz, "/metrics": metrics}


def health_server(exporter: AnyExporter, bind: str, port: int) -> HealthServer:
    """The exporter's endpoints on ``bind:port``, started (OSError when the port cannot be
    bound). No access line per probe or scrape: an idle exporter writes nothing."""
    return HealthServer(bind, port, health_routes(exporter), name="exporter-health",
                        server_version="clepsydra-analytics-exporter").start()
