"""HTTP routes of the analytics service: reports (list, one, its HTML and charts, run now) and
export status; /healthz, /metrics and /openapi.json come from clepsydra_web.ops. Thin: the
work is in reports.py and status.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CollectorRegistry

from clepsydra_analytics.reports import Reports
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.status import export_status
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.analytics import AnalyticsHealth, ExportStatus, ReportList, RunRequest
from clepsydra_web.jsonio import loads_object_or_empty

if TYPE_CHECKING:
    from clepsydra_analytics.export_files import ExportFiles


@dataclass(frozen=True, slots=True)
class Services:
    settings: AnalyticsSettings
    reports: Reports
    files: Callable[[], ExportFiles]
    """The export folder, opened on first use (app.py: pyarrow only then)."""
    reader: StoreReader
    registry: CollectorRegistry


def services() -> Services:
    found: Services = current_app.extensions["clepsydra_analytics"]
    return found


def _run_request() -> RunRequest:
    """The body (which may be left out), read with its wire type: unknown fields refused."""
    raw = request.get_data(cache=True)
    return RunRequest.from_json(loads_object_or_empty(raw), what="run",
                                strict=True)


reports_bp = Blueprint("reports", __name__)


@reports_bp.get("/v1/reports")
def list_reports() -> Response:
    return jsonify(ReportList(services().reports.runs()).to_json())


@reports_bp.post("/v1/reports")
def run_report() -> tuple[Response, int]:
    """Run the jobs now (exporting first what is new); 201 with the run's result."""
    body = _run_request()
    result = services().reports.run(body.job_names(), body.since)
    url = f"/v1/reports/{result.run_id}/{naming.REPORT_HTML}"
    return jsonify(replace(result, report_url=url).to_json()), 201


@reports_bp.get("/v1/reports/<run_id>")
def get_report(run_id: str) -> Response:
    return jsonify(services().reports.get(run_id).to_json())


@reports_bp.get(f"/v1/reports/<run_id>/{naming.REPORT_HTML}")
def report_html(run_id: str) -> Response:
    path = services().reports.file(run_id, naming.REPORT_HTML)
    return Response(path.read_bytes(), mimetype="text/html")


@reports_bp.get(f"/v1/reports/<run_id>/{naming.REPORT_CHARTS_DIR}/<name>")
def report_chart(run_id: str, name: str) -> Response:
    path = services().reports.file(run_id, f"{naming.REPORT_CHARTS_DIR}/{name}")
    return Response(path.read_bytes(), mimetype="image/png")


@reports_bp.get("/v1/export/status")
def status() -> Response:
    svc = services()
    topics = export_status(svc.files(), svc.reader, svc.settings.topics)
    return jsonify(ExportStatus(svc.settings.export_uri, topics).to_json())


def health() -> tuple[dict[str, Any], int]:
    """``/healthz``: the API answers (200); whether the store does is reported."""
    svc = services()
    try:
        svc.reader.http.get("/healthz")
        store_ok = True
    except ClepsydraError:
        store_ok = False
    return AnalyticsHealth("ok", store_ok, svc.settings.export_uri,
                           str(svc.settings.reports_dir)).to_json(), 200


BLUEPRINTS = (reports_bp,)
