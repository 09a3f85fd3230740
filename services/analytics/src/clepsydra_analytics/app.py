"""create_app(settings) -> Flask: the analytics service's HTTP API."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from clepsydra_analytics import api
from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.metrics import AnalyticsCollector, build_registry
from clepsydra_analytics.reports import Reports
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core import telemetry
from clepsydra_core.errors import ClepsydraError

logger = logging.getLogger(__name__)


def create_app(settings: AnalyticsSettings) -> Flask:
    telemetry.init_tracing("analytics", settings.common.otel_exporter)
    app = Flask("clepsydra_analytics")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    files = ExportFiles(settings.export_uri)
    reader = StoreReader(settings.store_url, timeout_s=10.0)
    reports = Reports(settings)
    registry = build_registry(AnalyticsCollector(files, reader, settings.topics, reports))
    app.extensions["clepsydra_analytics"] = api.Services(
        settings=settings, reports=reports, files=files, reader=reader, registry=registry)
    for blueprint in api.BLUEPRINTS:
        app.register_blueprint(blueprint)

    @app.errorhandler(ClepsydraError)
    def clepsydra_error(exc: ClepsydraError) -> tuple[Response, int]:
        if exc.http_status >= 500:
            logger.warning("request failed code=%s: %s", exc.code, exc.message)
        return jsonify(exc.to_json()), exc.http_status

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        code = (exc.name or "error").upper().replace(" ", "_")
        return jsonify({"error": code, "message": exc.description or code}), exc.code or 500

    return app
