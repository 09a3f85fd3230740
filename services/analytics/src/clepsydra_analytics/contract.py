"""The analytics service's HTTP contract: one :class:`~clepsydra_web.openapi.Route` per
operation; its values have no wire types yet, so their JSON Schemas are in :data:`SCHEMAS`.
``openapi.json`` is generated from it (``make openapi``); a unit test holds the checked-in file
equal to it.

Adding a route: add its ``Route(...)`` to :data:`ROUTES`, run ``make openapi``, commit both.
"""

from __future__ import annotations

from typing import Any

from clepsydra_analytics.jobs import JOB_NAMES
from clepsydra_core import naming
from clepsydra_web.openapi import Answer, Api, Param, Route, ops_routes

_INT_OR_NULL = {"type": ["integer", "null"]}
_RUN_ID = {"type": "string", "example": "20261125T103000123Z-1a2b"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "TopicStatus": {"type": "object", "properties": {
        "topic": {"type": "string"}, "queues": {"type": "integer"},
        "exportedRows": {"type": "integer"}, "storeEnd": {"type": "integer"},
        "exportedEnd": {"type": "integer"}, "lag": {"type": "integer"}}},
    "RunSummary": {"type": "object", "properties": {
        "runId": {"type": "string"}, "nowMs": {"type": "integer"}, "sinceMs": {"type": "integer"},
        "ran": {"type": "array", "items": {"type": "string"}},
        "inputFiles": {"type": "integer"}, "report": {"type": "string"},
        "rows": {"type": "object", "additionalProperties": {"type": "integer"}}}},
    "RunRequest": {"type": "object", "properties": {
        "jobs": {"oneOf": [{"type": "string", "enum": list(JOB_NAMES)},
                           {"type": "array", "items": {"type": "string",
                                                       "enum": list(JOB_NAMES)}}],
                 "description": f"{', '.join(JOB_NAMES)} (default: all)"},
        "job": {"type": "string", "enum": list(JOB_NAMES),
                "description": "one job (same as jobs)"},
        "since": {"type": "string", "description": "window, e.g. 2h (units s m h d); default "
                                                   "CLEPSYDRA_ANALYTICS_SINCE"}}},
    "RunResult": {"type": "object", "required": ["runId", "report", "jobs"], "properties": {
        "runId": {"type": "string"},
        "report": {"type": "string", "description": "path of the HTML file"},
        "reportUrl": {"type": "string"}, "ran": {"type": "array", "items": {"type": "string"}},
        "sinceMs": {"type": "integer"}, "nowMs": {"type": "integer"},
        "inputFiles": {"type": "integer"},
        "export": {"type": "object", "properties": {
            "mode": {"type": "string", "enum": ["exported", "waited", "skipped", "timeout",
                                               "store-unavailable"]},
            "rows": {"type": "integer"}}},
        "elapsedS": {"type": "number"},
        "jobs": {"type": "object", "description": "rows per table", "properties": {
            "lateness": {"type": "array", "items": {"type": "object", "properties": {
                "level": _INT_OR_NULL, "hour": {"type": "string"}, "count": _INT_OR_NULL,
                "p50Ms": _INT_OR_NULL, "p95Ms": _INT_OR_NULL, "p99Ms": _INT_OR_NULL,
                "maxMs": _INT_OR_NULL, "early": _INT_OR_NULL, "pending": _INT_OR_NULL}}},
            "funnel": {"type": "array", "items": {"type": "object", "properties": {
                "group": {"type": "string"}, "topic": {"type": "string"},
                "total": {"type": "integer"}, "firstTime": {"type": "integer"},
                "afterRetries": {"type": "object", "additionalProperties": {"type": "integer"}},
                "deadLettered": {"type": "integer"},
                "firstTimeShare": {"type": ["number", "null"]},
                "afterRetriesShare": {"type": ["object", "null"],
                                      "additionalProperties": {"type": "number"}},
                "deadLetteredShare": {"type": ["number", "null"]}}}},
            "dead-letters": {"type": "array", "items": {"type": "object", "properties": {
                "group": {"type": "string"}, "topic": {"type": "string"},
                "reason": {"type": "string"}, "count": {"type": "integer"},
                "oldestAgeS": {"type": "integer"}}}},
            "throughput": {"type": "array", "items": {"type": "object", "properties": {
                "topic": {"type": "string"}, "minute": {"type": "string"},
                "messages": {"type": "integer"}, "bytes": {"type": "integer"}}}},
            "consumer-lag": {"type": "array", "items": {"type": "object", "properties": {
                "group": {"type": "string"}, "topic": {"type": "string"},
                "lag": {"type": "integer"}, "queues": {"type": "integer"}}}}}}}},
}

PATH_PARAMS = {
    "runId": Param("runId", _RUN_ID),
    "name": Param("name", {"type": "string", "example": "lateness.png"}),
}
_NOT_FOUND = {404: "REPORT_NOT_FOUND"}

ROUTES = [
    Route("GET", "/v1/reports", "listReports", "Report runs kept, newest first",
          [Answer(200, "runs", {"type": "object", "required": ["reports"], "properties": {
              "reports": {"type": "array",
                          "items": {"$ref": "#/components/schemas/RunSummary"}}}})]),
    Route("POST", "/v1/reports", "runReport",
          "Export what is new, run the jobs now in a child process, write the report",
          [Answer(201, "the run's result", "RunResult")], request="RunRequest",
          request_required=False, errors=(500,),
          error_text={400: "UNKNOWN_JOB, INVALID_SINCE, CORRUPT_EXPORT_FILE, CONFIG_ERROR (e.g. "
                           "the export or reports folder is not writable)",
                      500: "REPORT_RUN_FAILED"}),
    Route("GET", "/v1/reports/{runId}", "getReport", "A report run's result",
          [Answer(200, "the run's result", "RunResult")], error_text=_NOT_FOUND),
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
          [Answer(200, "status", {"type": "object", "properties": {
              "exportUri": {"type": "string"},
              "topics": {"type": "array",
                         "items": {"$ref": "#/components/schemas/TopicStatus"}}}})]),
    *ops_routes(Route(
        "GET", "/healthz", "healthz", "The API answers; whether the store does is reported",
        [Answer(200, "alive", {"type": "object", "properties": {
            "status": {"type": "string"}, "store": {"type": "boolean"},
            "exportUri": {"type": "string"}, "reports": {"type": "string"}}})])),
]

API = Api(
    title="Clepsydra analytics", version="0.1.0",
    description="Reports over the Parquet export of the topics (delivery lateness per level, "
                "retry funnel, dead letters, throughput), export status, and running the "
                "PySpark jobs now. Errors are {error, message}. Generated from "
                "clepsydra_analytics.contract (make openapi).",
    routes=ROUTES, path_params=PATH_PARAMS, schemas=SCHEMAS)
