"""The exporter's /healthz: 200 while its loop turns (a failing store only reported), 503 when
it is stuck; /metrics counts rows and failed cycles."""

from __future__ import annotations

from pathlib import Path

from clepsydra_analytics.exporter import Exporter
from clepsydra_analytics.exporter_health import health_app
from clepsydra_analytics.settings import AnalyticsSettings


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_health_follows_the_loop(tmp_path: Path) -> None:
    clock = Clock()
    settings = AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path),
                                           "CLEPSYDRA_STORE_URL": "http://127.0.0.1:9"})
    exporter = Exporter(settings, clock_s=clock)
    client = health_app(exporter).test_client()
    assert client.get("/healthz").status_code == 200  # starting: no cycle yet

    exporter.last_cycle_s, exporter.last_error = clock.now_s, "the store did not answer"
    exporter.cycle_failures = 3
    answer = client.get("/healthz")
    assert answer.status_code == 200 and answer.json["lastError"] == "the store did not answer"
    assert "clepsydra_analytics_exporter_cycle_failures_total 3.0" in client.get(
        "/metrics").get_data(as_text=True)

    clock.now_s += 61
    answer = client.get("/healthz")
    assert answer.status_code == 503 and answer.json["status"] == "stuck"
    assert client.get("/nope").json["error"] == "NOT_FOUND"
