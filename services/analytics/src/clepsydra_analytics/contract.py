"""The analytics service's HTTP contract: one :class:`~clepsydra_web.openapi.Route` per
operation, its values the wire types of :mod:`clepsydra_core.wire.analytics`.
``openapi.json`` is generated from it (``make openapi``); a unit test holds the checked-in file
equal to it.

Adding a route: add its ``Route(...)`` to :data:`ROUTES`, run ``make openapi``, commit both.
"""

from __future__ import annotations

from clepsydra_core import naming
from clepsydra_core.wire.analytics import (
    EXAMPLE_RUN_ID,
    AnalyticsHealth,
    ExportStatus,
    ReportList,
    RunRequest,
    RunResult,
)
from clepsydra_web.openapi import Answer, Api, Param, Route, ops_routes

_RUN_ID = {"type": "string", "example": EXAMPLE_RUN_ID}

PATH_PARAMS = {
    "runId": Param("runId", _RUN_ID),
    "name": Param("name", {"type": "string", "example": "lateness.png"}),
}
_NOT_FOUND = {404: "REPORT_NOT_FOUND"}

ROUTES = [
    Route("GET", "/v1/reports", "listReports", "Report runs kept, newest first",
          [Answer(200, "runs", ReportList)]),
    Route("POST", "/v1/reports", "runReport",
          "Export what is new, run the jobs now in a child process, write the report",
          [Answer(201, "the run's result", RunResult)], request=RunRequest,
          request_required=False, errors=(500,),
          error_text={400: "UNKNOWN_JOB, INVALID_SINCE, CORRUPT_EXPORT_FILE, CONFIG_ERROR (e.g. "
                           "the export or reports folder is not writable)",
                      500: "REPORT_RUN_FAILED"}),
    Route("GET", "/v1/reports/{runId}", "getReport", "A report run's result",
          [Answer(200, "the run's result", RunResult)], error_text=_NOT_FOUND),
    Route("GET", f"/v1/reports/{{runId}}/{naming.REPORT_HTML}", "getReportHtml",
          "A report run's HTML page",
          [Answer(200, "the HTML report", {"type": "string"}, media="text/html")],
          error_text=_NOT_FOUND),
    Route("GET", f"/v1/reports/{{runId}}/{naming.REPORT_CHARTS_DIR}/{{name}}", "getReportChart",
          "One chart of a report run",
          [Answer(200, "a PNG chart", {"type": "string", "format": "binary"},
                  media="image/png")], error_text=_NOT_FOUND),
    Route("GET", "/v1/export/status", "exportStatus",
          "Per exported topic: rows exported and lag behind the store",
          [Answer(200, "status", ExportStatus)]),
    *ops_routes(Route(
        "GET", "/healthz", "healthz", "The API answers; whether the store does is reported",
        [Answer(200, "alive", AnalyticsHealth)])),
]

API = Api(
    title="Clepsydra analytics", version="0.1.0",
    description="Reports over the Parquet export of the topics (delivery lateness per level, "
                "retry funnel, dead letters, throughput), export status, and running the "
                "PySpark jobs now. Errors are {error, message}. Generated from "
                "clepsydra_analytics.contract (make openapi).",
    routes=ROUTES, path_params=PATH_PARAMS)
