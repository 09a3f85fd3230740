"""``python -m clepsydra_scheduler worker --beat`` (DEC-memory-at-rest): beat
runs on a thread of the worker, one process instead of two. Its keep-alives must still reach
the levels: once a level's chain of runs is broken, only a keep-alive starts it again."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from clepsydra_core.naming import delay_lease_key
from tests.fixtures.scheduler import TOPIC, SchedulerStack, assert_each_once
from tests.fixtures.stack import descendants
from tools.processes import free_port, wait_until

pytestmark = pytest.mark.integration

THIEF = "not-a-run-of-ours"


def healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except OSError:
        return 0, {}


def test_the_embedded_beat_restarts_a_level_whose_runs_stopped(stack: SchedulerStack) -> None:
    worker_port, beat_port = free_port(), free_port()
    proc = stack.worker_with_beat(CLEPSYDRA_SCHEDULER_PORT=str(worker_port),
                                  CLEPSYDRA_SCHEDULER_BEAT_PORT=str(beat_port))
    # one process answers both health endpoints, and it has no child (no forked beat)
    wait_until(lambda: healthz(worker_port)[0] == 200, 30, what="the worker healthy")
    wait_until(lambda: healthz(beat_port)[0] == 200, 30, what="beat healthy")
    assert healthz(beat_port)[1] == {"status": "ok", "role": "beat", "problems": [],
                                     "redis": {"ok": True, "error": None}, "embedded": True}
    assert descendants(proc.pid) == {}

    # level 1's lease taken by someone else: the level's run stops at its next renewal (or its
    # successor finds the lease taken), the chain of runs is broken, and once the thief's
    # lease expires nothing serves level 1 but beat's next keep-alive (a plain worker, without
    # beat, never delivers these)
    redis = stack.redis()
    redis.set(delay_lease_key(1), THIEF, px=2_000)
    stack.produce(20, level=1)
    stack.wait_delivered(20, timeout_s=30)
    assert_each_once(stack.api.pull_all(TOPIC), [f"m{i}" for i in range(20)])
    wait_until(lambda: redis.get(delay_lease_key(1)) not in (None, THIEF), 30,
               what="a new run of level 1 holding its lease")
