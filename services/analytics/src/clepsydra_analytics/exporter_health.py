"""The exporter's own /healthz and /metrics (Kubernetes probes it; Prometheus scrapes it), on
CLEPSYDRA_ANALYTICS_EXPORTER_PORT, served by a thread beside the export loop.

/healthz is 200 while the loop turns (a cycle ended, well or not, within the stale limit) and
503 when it is stuck; a store that does not answer is reported in the body but keeps it 200,
so a store outage does not get the exporter restarted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import orjson
from flask import Flask, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from werkzeug.serving import BaseWSGIServer, make_server

from clepsydra_analytics.exporter import Exporter
from clepsydra_web.errors import JSON_TYPE, register_error_handlers

STALE_MIN_S = 60.0


def stale_after_s(exporter: Exporter) -> float:
    return max(STALE_MIN_S, 10 * exporter.settings.poll_interval_s)


def health(exporter: Exporter) -> tuple[dict[str, Any], int]:
    now = exporter.clock_s()
    last = exporter.last_cycle_s
    age_s = None if last is None else now - last
    stuck = age_s is not None and age_s > stale_after_s(exporter)
    body = {"status": "stuck" if stuck else "ok", "lastCycleAgeS": age_s,
            "lastError": exporter.last_error, "rowsWritten": exporter.rows_written_total,
            "exportUri": exporter.settings.export_uri}
    return body, 503 if stuck else 200


class ExporterCollector(Collector):
    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        e = self.exporter
        yield CounterMetricFamily("clepsydra_analytics_exporter_rows",
                                  "Rows written to export files", value=e.rows_written_total)
        yield CounterMetricFamily("clepsydra_analytics_exporter_cycle_failures",
                                  "Export cycles that failed (store away, write error)",
                                  value=e.cycle_failures)
        age = GaugeMetricFamily("clepsydra_analytics_exporter_last_cycle_age_seconds",
                                "Seconds since the last export cycle ended")
        if e.last_cycle_s is not None:
            age.add_metric([], e.clock_s() - e.last_cycle_s)
        yield age


def health_app(exporter: Exporter) -> Flask:
    app = Flask("clepsydra_analytics_exporter")
    registry = CollectorRegistry()
    registry.register(ExporterCollector(exporter))

    @app.get("/healthz")
    def healthz() -> Response:
        body, status = health(exporter)
        return Response(orjson.dumps(body), status=status, mimetype=JSON_TYPE)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    register_error_handlers(app, size_setting="CLEPSYDRA_ANALYTICS_MAX_REQUEST_BYTES")
    return app


class HealthServer:
    def __init__(self, exporter: Exporter, bind: str, port: int) -> None:
        # no access line per probe or scrape: an idle exporter writes nothing (issue 20.7)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self.server: BaseWSGIServer = make_server(bind, port, health_app(exporter),
                                                  threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="exporter-health")

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(5)
        self.server.server_close()
