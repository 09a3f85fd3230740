"""The local stack's retry service and web console served by one process (tools/host.py,
DEC-stack-console-hosted), as real processes: a redis-server, the store and ``python -m
tools.host clepsydra_retry clepsydra_console`` on free ports. Each service answers its own
routes, ``/healthz`` and ``/metrics`` on its own port, as when each is its own process."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tools.parts import CONSOLE, RETRY_WITH_CONSOLE, Stack
from tools.processes import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[Stack]:
    stack = (Stack(tmp_path / "stack", env={"CLEPSYDRA_SINGLE_PROCESS": "true"})
             .with_redis().with_store().with_part(RETRY_WITH_CONSOLE))
    with stack.start():
        yield stack


def _get(url: str) -> requests.Response:
    return requests.get(url, timeout=10, allow_redirects=False)


def test_one_process_answers_both_services_on_their_own_ports(hosted: Stack) -> None:
    host = hosted["retry"]
    retry_url, console_url = hosted.url(RETRY_WITH_CONSOLE), hosted.url(CONSOLE)
    assert retry_url != console_url
    assert host.argv[1:] == ["-m", "tools.host", "clepsydra_retry", "clepsydra_console"]
    # the retry service's health answer on its port, the console's on its own
    retry_health = _get(retry_url + "/healthz")
    console_health = _get(console_url + "/healthz")
    assert retry_health.status_code == console_health.status_code == 200
    assert "redis" in retry_health.json() and "redis" not in console_health.json()
    assert console_health.json()["retry"] is True  # the console reaches the retry service
    # each one's routes on its own port only
    created = requests.put(retry_url + "/v1/groups/hosted-group", json={}, timeout=10)
    assert created.status_code == 201, created.text
    assert _get(retry_url + "/v1/groups/hosted-group").json()["group"] == "hosted-group"
    page = _get(console_url + "/")
    assert page.status_code in (200, 302) and "text/html" in page.headers["Content-Type"]
    assert _get(console_url + "/v1/groups/hosted-group").status_code == 404
    assert _get(retry_url + "/").headers["Content-Type"].startswith("application/json")
    # each its own metrics
    assert "clepsydra_retry_send_backs_total" in _get(retry_url + "/metrics").text
    assert "clepsydra_retry_send_backs_total" not in _get(console_url + "/metrics").text
    # one log file, each line named by the service that wrote it
    services = set()
    for line in host.log().splitlines():
        try:
            services.add(json.loads(line)["service"])
        except (ValueError, KeyError):
            continue
    assert {"clepsydra-retry", "clepsydra-console"} <= services


def test_a_stop_signal_stops_both(hosted: Stack) -> None:
    host = hosted["retry"]
    assert host.proc is not None
    os.kill(host.proc.pid, signal.SIGTERM)
    assert host.proc.wait(30) == 0
    for url in (hosted.url(RETRY_WITH_CONSOLE), hosted.url(CONSOLE)):
        wait_until(lambda url=url: not _answers(url), 10, what=f"{url} closed")


def _answers(url: str) -> bool:
    try:
        _get(url + "/healthz")
    except requests.RequestException:
        return False
    return True
