"""create_app(settings) -> Flask: the analytics service's HTTP API.

The export folder is opened on the first request that needs it (``/v1/export/status``,
``/metrics``): its module imports pyarrow, ~45 MiB of the worker's memory that an API at rest
does not need (DEC-memory-at-rest)."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from flask import Flask

from clepsydra_analytics import api
from clepsydra_analytics.access import ANALYTICS_ACCESS
from clepsydra_analytics.metrics import AnalyticsCollector, build_registry
from clepsydra_analytics.reports import Reports
from clepsydra_analytics.settings import MAX_REQUEST_BYTES_VAR, AnalyticsSettings
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core.runtime import telemetry
from clepsydra_web import auth
from clepsydra_web.errors import register_error_handlers
from clepsydra_web.ops import ops_blueprint

if TYPE_CHECKING:
    from clepsydra_analytics.export_files import ExportFiles

logger = logging.getLogger(__name__)


def create_app(settings: AnalyticsSettings) -> Flask:
    telemetry.init_tracing("analytics", settings.common.otel_exporter)
    app = Flask("clepsydra_analytics")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @functools.cache
    def files() -> ExportFiles:
        from clepsydra_analytics.export_files import ExportFiles

        return ExportFiles(settings.export_uri)

    reader = StoreReader(settings.store_url, timeout_s=10.0)
    reports = Reports(settings)
    registry = build_registry(AnalyticsCollector(files, reader, settings.topics, reports))
    app.extensions["clepsydra_analytics"] = api.Services(
        settings=settings, reports=reports, files=files, reader=reader, registry=registry)
    for blueprint in api.BLUEPRINTS:
        app.register_blueprint(blueprint)
    app.register_blueprint(ops_blueprint("clepsydra_analytics", health=api.health,
                                         registry=lambda: registry))
    register_error_handlers(app, size_setting=MAX_REQUEST_BYTES_VAR)
    auth.install(app, settings.common.auth, ANALYTICS_ACCESS, service="analytics API")
    return app
