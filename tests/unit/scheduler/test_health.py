"""The scheduler's health checks (health.py) over the in-memory twins of Redis and the store."""

from __future__ import annotations

import json

import pytest

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_scheduler.health import check_beat, check_worker, report_response
from clepsydra_scheduler.level_state import MemoryLevelState
from clepsydra_scheduler.ports import LevelSample, WorkerIdentity
from clepsydra_scheduler.settings import SchedulerSettings
from tests.fixtures.scheduler import FakeClock, FakeStore

LEVELS = DelayLevels.parse("1s 2s 3s")
URL = "http://store.example:8081"
A = WorkerIdentity("pod-a/worker", 1)


def _parts() -> tuple[FakeClock, MemoryLevelState, FakeStore]:
    clock = FakeClock()
    return clock, MemoryLevelState(clock.now_ms), FakeStore([1_000, 2_000, 3_000], clock.now_ms)


def test_worker_is_healthy_when_every_level_is_leased() -> None:
    clock, offsets, store = _parts()
    for level in (1, 2, 3):
        assert offsets.acquire(level, WorkerIdentity(f"pod-{level}/worker", 1), 3_000)
    offsets.record(2, LevelSample(now_ms=clock.now - 400, delivered=0, parked=0, skipped=0,
                                  lateness_ms=(), backlog=0, lag_ms=0, min_offset=0,
                                  max_offset=0, handed_over=-1))
    clock.wait(1.0)
    status, ctype, body = report_response(check_worker(LEVELS, offsets, store, URL,
                                                       clock.now_ms()))
    doc = json.loads(body)
    assert (status, ctype, doc["status"], doc["problems"]) == (200, "application/json", "ok", [])
    assert doc["store"] == {"ok": True, "url": URL, "error": None}
    assert [lv["leaseTtlMs"] for lv in doc["levels"]] == [2_000, 2_000, 2_000]
    assert [lv["statsAgeMs"] for lv in doc["levels"]] == [None, 1_400, None]


def test_a_level_whose_lease_ran_out_makes_the_worker_unhealthy() -> None:
    clock, offsets, store = _parts()
    assert offsets.acquire(1, A, 10_000) and offsets.acquire(2, A, 10_000)
    assert offsets.acquire(3, A, 1_000)
    clock.wait(1.5)  # level 3's run stopped renewing: its lease expired
    report = check_worker(LEVELS, offsets, store, URL, clock.now_ms())
    assert not report.ok
    assert report.problems == ("level 3: no run holds its lease",)
    assert [lv.alive for lv in report.levels] == [True, True, False]
    assert report_response(report)[0] == 503


def test_store_or_redis_away_is_reported_by_name() -> None:
    clock, offsets, store = _parts()
    for level in (1, 2, 3):
        offsets.acquire(level, A, 5_000)
    store.down = True
    report = check_worker(LEVELS, offsets, store, URL, clock.now_ms())
    assert report.problems[0].startswith("store: ") and report.store_error is not None
    assert report.redis_error is None and len(report.problems) == 1

    offsets.down = True
    doc = json.loads(report_response(check_worker(LEVELS, offsets, store, URL,
                                                  clock.now_ms()))[2])
    assert doc["status"] == "unhealthy" and doc["redis"]["ok"] is False
    assert doc["store"]["ok"] is False and doc["levels"] == []
    assert {p.split(":")[0] for p in doc["problems"]} == {"store", "redis"}


def test_beat_needs_only_redis() -> None:
    _, offsets, _ = _parts()
    assert check_beat(offsets).ok  # no level leased: beat does not care
    offsets.down = True
    report = check_beat(offsets)
    assert not report.ok and report.problems[0].startswith("redis: ")
    assert json.loads(report_response(report)[2])["role"] == "beat"


def test_beat_embedded_in_a_worker_needs_its_thread_running() -> None:
    # `worker --beat` (the local stack) runs beat on a thread of the worker
    _, offsets, _ = _parts()
    running = check_beat(offsets, beat_thread_alive=True)
    assert running.ok and json.loads(report_response(running)[2])["embedded"] is True
    stopped = check_beat(offsets, beat_thread_alive=False)
    assert not stopped.ok and stopped.problems == ("beat: its thread in this worker is not "
                                                   "running",)
    assert "embedded" not in json.loads(report_response(check_beat(offsets))[2])


def test_health_ports_default_and_zero_turns_them_off() -> None:
    settings = SchedulerSettings.from_env({})
    assert (settings.port, settings.beat_port, settings.bind) == (8083, 8084, "127.0.0.1")
    off = SchedulerSettings.from_env({"CLEPSYDRA_SCHEDULER_PORT": "0",
                                      "CLEPSYDRA_SCHEDULER_BEAT_PORT": "0",
                                      "CLEPSYDRA_SCHEDULER_BIND": "0.0.0.0"})
    assert (off.port, off.beat_port, off.bind) == (None, None, "0.0.0.0")


def test_bad_health_ports_stop_startup_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="CLEPSYDRA_SCHEDULER_PORT=70000"):
        SchedulerSettings.from_env({"CLEPSYDRA_SCHEDULER_PORT": "70000"})
    with pytest.raises(ConfigError, match="both 9000"):
        SchedulerSettings.from_env({"CLEPSYDRA_SCHEDULER_PORT": "9000",
                                    "CLEPSYDRA_SCHEDULER_BEAT_PORT": "9000"})


def test_a_worker_not_yet_consuming_its_queues_is_not_healthy() -> None:
    # the worker answers again only once it takes tasks: a restarted worker's /healthz is 503
    # while its Celery consumer starts, even though its previous process's leases still live
    clock, offsets, store = _parts()
    for level in (1, 2, 3):
        offsets.acquire(level, A, 5_000)
    report = check_worker(LEVELS, offsets, store, URL, clock.now_ms(), consuming=False)
    assert report.problems == ("worker: not consuming its queues yet",)
    assert report_response(report)[0] == 503
    assert check_worker(LEVELS, offsets, store, URL, clock.now_ms(), consuming=True).ok
