"""One log format, quiet when idle: every process the stack starts (store, retry
and analytics API under gunicorn, the latter with the analytics schedule's Celery worker and
the exporter on threads; the scheduler's worker with its beat embedded) writes the same JSON
lines - or the same fields as text with CLEPSYDRA_LOG_FORMAT=text - no warning on a clean
start, and nothing at the default level while idle."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.fixtures.stack import RunningStack
from tools.processes import wait_until

pytestmark = pytest.mark.e2e

FIELDS = ["time", "level", "service", "logger", "message"]
OURS = ("store", "retry", "scheduler", "analytics")
"""Every child of the stack but redis-server (not a process of ours)."""
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
RUN_S = 1.0
IDLE_RUNS = 4
"""The idle window: this many scheduler runs of every level (CLEPSYDRA_SCHEDULER_RUN_S) and
keep-alives (CLEPSYDRA_SCHEDULER_KEEPALIVE_S), where an idle run used to log one line per
level."""
OWN_DISK = {"CLEPSYDRA_STORE_DISK_CAPACITY_BYTES": str(1 << 30)}
"""The store's disk ratio counted over its own files (a 1 GiB quota), not the machine's disk:
a machine whose disk is past CLEPSYDRA_STORE_DISK_WARN_RATIO makes the store warn, rightly,
and that is not what these tests look at."""
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|"
                       r"CRITICAL) +clepsydra-[a-z]+ [\w.]+: ")


def _logs(stack: RunningStack) -> dict[str, list[str]]:
    logs: dict[str, list[str]] = {}
    for name in OURS:
        path: Path = stack.home / "logs" / f"{name}.log"
        logs[name] = path.read_text(errors="replace").splitlines()
    return logs


def _auth_off(line: dict[str, str]) -> bool:
    """The start-up warning of a service answering without tokens (CLEPSYDRA_AUTH=off)."""
    return (line["level"] == "WARNING" and line["logger"] == "clepsydra_web.auth"
            and line["message"].startswith("access control is off"))


def test_every_process_logs_json_and_an_idle_stack_says_nothing(
        start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack(CLEPSYDRA_SCHEDULER_RUN_S=str(RUN_S),
                        CLEPSYDRA_SCHEDULER_KEEPALIVE_S=str(RUN_S),
                        **OWN_DISK)
    created = requests.post(f"{stack.store_url}/v1/topics", json={"name": "quiet", "queues": 1},
                            headers={"traceparent": TRACEPARENT}, timeout=5)
    assert created.status_code == 201, created.text

    def traced() -> bool:
        return any(TRACE_ID in line for line in _logs(stack)["store"])

    wait_until(traced, 10.0, interval_s=0.1, what="the store's line inside the request's span")
    logs = _logs(stack)
    for name, lines in logs.items():
        assert lines, f"{name} wrote nothing"
        for line in lines:
            out = json.loads(line)  # every line a JSON object ...
            assert isinstance(out, dict) and list(out)[:5] == FIELDS, f"{name}: {line}"
            assert out["service"].startswith("clepsydra-"), f"{name}: {line}"
            # ... and a clean start warns about nothing (Celery's root warning included) but
            # the one warning meant to be there: access control is off
            assert out["level"] in ("INFO", "DEBUG") or _auth_off(out), f"{name}: {line}"
    [inside] = [json.loads(line) for line in logs["store"] if TRACE_ID in line]
    assert inside["trace_id"] == TRACE_ID and re.fullmatch(r"[0-9a-f]{16}", inside["span_id"])
    assert inside["service"] == "clepsydra-store" and "topic created" in inside["message"]

    time.sleep(IDLE_RUNS * RUN_S)  # bounded: the idle window itself
    after = _logs(stack)
    added = {name: after[name][len(lines):] for name, lines in logs.items()}
    assert added == {name: [] for name in OURS}, added


def test_text_format_for_people(start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack(CLEPSYDRA_LOG_FORMAT="text")
    for name, lines in _logs(stack).items():
        assert lines, f"{name} wrote nothing"
        for line in lines:
            assert TEXT_LINE.match(line), f"{name}: {line}"
