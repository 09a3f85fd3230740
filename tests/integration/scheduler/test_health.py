"""The scheduler's health endpoints on real processes: Redis, the store, Celery worker and beat."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.fixtures.scheduler import SchedulerStack
from tools.processes import free_port, wait_until

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError as exc:  # not listening (yet)
        return 0, str(exc)


def healthz(port: int) -> tuple[int, dict[str, Any]]:
    status, body = get(f"http://127.0.0.1:{port}/healthz")
    return status, (json.loads(body) if status else {})


def test_worker_healthz_follows_its_leases_and_the_store(stack: SchedulerStack) -> None:
    worker_port, beat_port = free_port(), free_port()
    beat = stack.beat(CLEPSYDRA_SCHEDULER_BEAT_PORT=str(beat_port))
    wait_until(lambda: get(f"http://127.0.0.1:{beat_port}/livez")[0] == 200, 30,
               what="beat health endpoint")
    status, doc = healthz(beat_port)
    assert (status, doc["status"], doc["role"], doc["redis"]["ok"]) == (200, "ok", "beat", True)

    stack.worker(CLEPSYDRA_SCHEDULER_PORT=str(worker_port))
    wait_until(lambda: healthz(worker_port)[0] == 200, 30, what="worker healthy")
    status, doc = healthz(worker_port)
    assert doc["status"] == "ok" and doc["store"] == {"ok": True, "url": stack.store.url,
                                                      "error": None}
    assert [lv["level"] for lv in doc["levels"]] == [1, 2, 3]
    assert all(lv["leased"] and lv["leaseTtlMs"] > 0 for lv in doc["levels"])
    status, text = get(f"http://127.0.0.1:{worker_port}/metrics")
    assert status == 200 and 'clepsydra_scheduler_backlog{level="3"}' in text
    assert get(f"http://127.0.0.1:{worker_port}/nothing")[0] == 404

    stack.store.stop()
    wait_until(lambda: healthz(worker_port)[0] == 503, 30, what="worker unhealthy")
    status, doc = healthz(worker_port)
    assert doc["store"]["ok"] is False and doc["problems"][0].startswith("store: ")
    assert doc["redis"]["ok"] is True
    assert get(f"http://127.0.0.1:{worker_port}/livez")[0] == 200  # alive all the same
    assert beat.alive()


def test_a_worker_whose_health_port_is_taken_stops_saying_so(stack: SchedulerStack) -> None:
    port = free_port()
    stack.worker(CLEPSYDRA_SCHEDULER_PORT=str(port))
    second = subprocess.run([sys.executable, "-m", "clepsydra_scheduler", "worker"],
                            env={**stack.procs[0].env, "CLEPSYDRA_SCHEDULER_PORT": str(port)},
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert f"cannot serve worker health on 127.0.0.1:{port}" in second.stderr
    assert "CLEPSYDRA_SCHEDULER_PORT" in second.stderr
