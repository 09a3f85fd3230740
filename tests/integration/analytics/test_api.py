"""The analytics API (Flask test client, real store and export) and the `clepsydra report` /
`clepsydra export` commands against the API run as a process."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from clepsydra_analytics import report
from clepsydra_analytics.app import create_app
from clepsydra_analytics.exporter import Exporter
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_client.cli.main import main as cli_main
from clepsydra_core import naming
from tests.integration.analytics.conftest import create_topic, produce, settings_for
from tools.parts import ANALYTICS_API, service
from tools.processes import HttpService

pytestmark = pytest.mark.integration

RESULT = {"runId": "20261125T100000Z-abcd", "sinceMs": 0, "nowMs": 1_764_064_800_000,
          "ran": ["lateness", "funnel"], "inputFiles": 3, "export": {"mode": "skipped"},
          "elapsedS": 1.0, "jobs": {
              "lateness": [{"level": 3, "hour": "2025-11-25T10", "count": 4, "p50Ms": 5,
                            "p95Ms": 9, "p99Ms": 9, "maxMs": 9, "early": 0, "pending": 1}],
              "funnel": [{"group": "billing", "topic": "orders", "total": 4, "firstTime": 2,
                          "afterRetries": {"1": 1}, "deadLettered": 1,
                          "firstTimeShare": 0.5, "deadLetteredShare": 0.25}]}}


def hand_made_run(settings: AnalyticsSettings) -> Path:
    run_dir = settings.reports_dir / RESULT["runId"]
    run_dir.mkdir(parents=True)
    result = {**RESULT, "report": str(run_dir / naming.REPORT_HTML)}
    report.write_report(run_dir, result)
    (run_dir / naming.REPORT_RESULT).write_text(json.dumps(result))
    return run_dir


@pytest.fixture
def exported_store(start_store: Callable[..., HttpService],
                   tmp_path: Path) -> tuple[HttpService, AnalyticsSettings]:
    store = start_store()
    create_topic(store.url, "orders", queues=2)
    produce(store.url, "orders", 40)
    settings = settings_for(store.url, tmp_path)
    exporter = Exporter(settings)
    exporter.prepare()
    exporter.catch_up(30)
    produce(store.url, "orders", 5, prefix="late")  # not exported: a lag of 5
    return store, settings


def test_routes(exported_store: tuple[HttpService, AnalyticsSettings]) -> None:
    _store, settings = exported_store
    client: FlaskClient = create_app(settings).test_client()
    assert client.get("/healthz").json["store"] is True
    [orders] = client.get("/v1/export/status").json["topics"]
    assert (orders["topic"], orders["exportedRows"], orders["lag"]) == ("orders", 40, 5)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'clepsydra_analytics_export_lag_messages{topic="orders"} 5.0' in metrics
    paths = client.get("/openapi.json").json["paths"]
    assert {"/v1/reports", "/v1/reports/{runId}", "/v1/export/status"} <= paths.keys()

    assert client.get("/v1/reports").json == {"reports": []}
    hand_made_run(settings)
    [listed] = client.get("/v1/reports").json["reports"]
    assert listed["runId"] == RESULT["runId"] and listed["rows"] == {"lateness": 1, "funnel": 1}
    assert client.get(f"/v1/reports/{RESULT['runId']}").json["jobs"] == RESULT["jobs"]
    page = client.get(f"/v1/reports/{RESULT['runId']}/report.html")
    assert page.status_code == 200 and b"charts/lateness.png" in page.data
    chart = client.get(f"/v1/reports/{RESULT['runId']}/charts/funnel.png")
    assert chart.status_code == 200 and chart.data.startswith(b"\x89PNG")


def test_bad_requests_are_named(exported_store: tuple[HttpService, AnalyticsSettings]) -> None:
    _store, settings = exported_store
    client = create_app(settings).test_client()
    resp = client.post("/v1/reports", json={"jobs": ["latency"]})
    assert resp.status_code == 400 and resp.json["error"] == "UNKNOWN_JOB"
    assert "latency" in resp.json["message"]
    resp = client.post("/v1/reports", json={"since": "yesterday"})
    assert resp.status_code == 400 and resp.json["error"] == "INVALID_SINCE"
    resp = client.post("/v1/reports", data="{not json", content_type="application/json")
    assert resp.status_code == 400 and resp.json["error"] == "INVALID_JSON"
    assert client.get("/v1/reports/nope").json["error"] == "REPORT_NOT_FOUND"
    hand_made_run(settings)
    resp = client.get(f"/v1/reports/{RESULT['runId']}/charts/..%2F..%2Fresult.json")
    assert resp.status_code == 404


def test_cli_report_and_export_commands(exported_store: tuple[HttpService, AnalyticsSettings],
                                        tmp_path: Path) -> None:
    store, settings = exported_store
    hand_made_run(settings)
    api = service(ANALYTICS_API, tmp_path, store_url=store.url).start()
    try:
        def cli(*argv: str) -> tuple[int, str, str]:
            out, err = io.StringIO(), io.StringIO()
            code = cli_main(["--analytics-url", api.url, *argv], out=out, err=err)
            return code, out.getvalue(), err.getvalue()

        code, out, _ = cli("export", "status")
        assert code == 0 and out.strip() == "orders  lag=5 exported=40 queues=2"
        code, out, _ = cli("report", "list")
        assert code == 0 and RESULT["runId"] in out
        code, out, _ = cli("report", "show", RESULT["runId"])
        assert code == 0 and "billing" in out and "p50Ms" in out
        code, out, _ = cli("--json", "report", "show", RESULT["runId"])
        assert json.loads(out)["jobs"]["funnel"][0]["deadLettered"] == 1
        code, _, err = cli("report", "run", "--job", "latency")
        assert code == 1 and "unknown job 'latency'" in err and "Traceback" not in err
        code, _, err = cli("report", "run", "--since", "2 hours")
        assert code == 1 and "INVALID_SINCE" in err and "Traceback" not in err
    finally:
        api.stop()
    assert time.time() > 0
