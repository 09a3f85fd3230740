"""The exporter's /healthz: 200 while its loop turns (a failing store only reported), 503 when
it is stuck; /metrics counts rows and failed cycles. Served by the standard library's HTTP
server on loopback (no Flask in the exporter's process), with the v1 error shape for
what is not a route."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from clepsydra_analytics.exporter import Exporter
from clepsydra_analytics.exporter_health import health_server
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core.runtime.health_http import HealthServer


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def call(server: HealthServer, path: str, method: str = "GET") -> tuple[int, dict[str, str],
                                                                          bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def exporter(tmp_path: Path, clock: Clock) -> Exporter:
    settings = AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path),
                                           "CLEPSYDRA_STORE_URL": "http://127.0.0.1:9"})
    return Exporter(settings, clock_s=clock)


@pytest.fixture
def server(exporter: Exporter) -> Iterator[HealthServer]:
    started = health_server(exporter, "127.0.0.1", 0)
    yield started
    started.close()


def test_health_follows_the_loop(exporter: Exporter, clock: Clock,
                                 server: HealthServer) -> None:
    status, headers, _ = call(server, "/healthz")
    assert status == 200 and headers["Content-Type"] == "application/json"  # no cycle yet

    exporter.last_cycle_s, exporter.last_error = clock.now_s, "the store did not answer"
    exporter.cycle_failures = 3
    status, _, body = call(server, "/healthz")
    assert status == 200 and json.loads(body)["lastError"] == "the store did not answer"
    status, headers, body = call(server, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b"clepsydra_analytics_exporter_cycle_failures_total 3.0" in body

    clock.now_s += 61
    status, _, body = call(server, "/healthz")
    assert status == 503 and json.loads(body)["status"] == "stuck"


def test_what_is_not_a_route_answers_the_v1_error_shape(server: HealthServer) -> None:
    status, _, body = call(server, "/nope")
    assert status == 404 and json.loads(body)["error"] == "NOT_FOUND"
    status, headers, body = call(server, "/healthz", "POST")
    assert status == 405 and json.loads(body)["error"] == "METHOD_NOT_ALLOWED"
    assert headers["Allow"] == "GET, HEAD"
    status, headers, body = call(server, "/healthz", "HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
