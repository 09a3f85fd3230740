"""HTTP routes of the analytics service: reports (list, one, its HTML and charts, run now) and
export status; /healthz, /metrics and /openapi.json come from clepsydra_web.ops. Thin: the
work is in reports.py and status.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CollectorRegistry

from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.reports import Reports
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.status import export_status
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, ValidationError
from clepsydra_web.jsonio import loads_object


@dataclass(frozen=True, slots=True)
class Services:
    settings: AnalyticsSettings
    reports: Reports
    files: ExportFiles
    reader: StoreReader
    registry: CollectorRegistry


def services() -> Services:
    found: Services = current_app.extensions["clepsydra_analytics"]
    return found


def _body() -> dict[str, Any]:
    raw = request.get_data(cache=True)
    return loads_object(raw) if raw.strip() else {}


def _job_names(body: dict[str, Any]) -> list[str] | None:
    raw = body.get("jobs", body.get("job"))
    if raw is None:
        return None
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValidationError("jobs must be a job name or a list of job names",
                              code="INVALID_REQUEST")
    return names


reports_bp = Blueprint("reports", __name__)


@reports_bp.get("/v1/reports")
def list_reports() -> Response:
    return jsonify({"reports": services().reports.runs()})


@reports_bp.post("/v1/reports")
def run_report() -> tuple[Response, int]:
    """Run the jobs now (exporting first what is new); 201 with the run's result."""
    body = _body()
    since = body.get("since")
    if since is not None and not isinstance(since, str):
        raise ValidationError("since must be a duration such as \"2h\"", code="INVALID_SINCE")
    result = services().reports.run(_job_names(body), since)
    result["reportUrl"] = f"/v1/reports/{result['runId']}/{naming.REPORT_HTML}"
    return jsonify(result), 201


@reports_bp.get("/v1/reports/<run_id>")
def get_report(run_id: str) -> Response:
    return jsonify(services().reports.get(run_id))


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
    topics = export_status(svc.files, svc.reader, svc.settings.topics)
    return jsonify({"exportUri": svc.settings.export_uri,
                    "topics": [t.to_json() for t in topics]})


def health() -> tuple[dict[str, Any], int]:
    """``/healthz``: the API answers (200); whether the store does is reported."""
    svc = services()
    try:
        svc.reader.http.get("/healthz")
        store_ok = True
    except ClepsydraError:
        store_ok = False
    return {"status": "ok", "store": store_ok, "exportUri": svc.settings.export_uri,
            "reports": str(svc.settings.reports_dir)}, 200


BLUEPRINTS = (reports_bp,)
