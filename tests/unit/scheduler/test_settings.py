"""SchedulerSettings and the Celery app built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import schedule_queue_name
from clepsydra_scheduler.celery_app import beat_schedule, create_celery, level_queues
from clepsydra_scheduler.settings import SchedulerSettings


def test_defaults_need_no_configuration() -> None:
    settings = SchedulerSettings.from_env({})
    assert settings.levels.max_level == 18
    assert (settings.keepalive_s, settings.lease_ms, settings.run_s) == (5.0, 10_000, 60.0)
    # a whole hand-over request (the store takes it 2,000 at a time)
    # DEC-scheduler-store-retry: store errors retried after 0.1 s, doubling to 0.5 s at most
    assert (settings.batch, settings.poll_ms, settings.backoff_s) == (10_000, 1_000, 0.5)
    assert settings.worker_name.endswith("/worker") and settings.worker_id == "worker"
    assert settings.concurrency == 22
    assert settings.metrics_port is None
    assert settings.common.effective_redis_url == "redis://127.0.0.1:6380/0"


def test_scheduler_variables_are_read(tmp_path: Path) -> None:
    settings = SchedulerSettings.from_env({
        "CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_DELAY_LEVELS": "1s 2s 3s",
        "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:7000/1",
        "CLEPSYDRA_SCHEDULER_KEEPALIVE_S": "1.5", "CLEPSYDRA_SCHEDULER_LEASE_S": "4",
        "CLEPSYDRA_SCHEDULER_RUN_S": "20", "CLEPSYDRA_SCHEDULER_BATCH": "50",
        "CLEPSYDRA_SCHEDULER_POLL_MS": "100", "CLEPSYDRA_SCHEDULER_BACKOFF_S": "0.5",
        "CLEPSYDRA_SCHEDULER_METRICS_PORT": "9101", "CLEPSYDRA_SCHEDULER_POD_NAME": "vm-1",
    })
    assert settings.levels.max_level == 3 and settings.concurrency == 7
    assert (settings.keepalive_s, settings.lease_ms, settings.run_s) == (1.5, 4_000, 20.0)
    assert (settings.batch, settings.poll_ms, settings.backoff_s) == (50, 100, 0.5)
    assert settings.metrics_port == 9101
    assert settings.worker_name == "vm-1/worker"
    assert settings.beat_schedule_path == tmp_path / "scheduler" / "celerybeat-schedule"


@pytest.mark.parametrize(("name", "value"), [
    ("CLEPSYDRA_SCHEDULER_BATCH", "0"), ("CLEPSYDRA_SCHEDULER_POLL_MS", "fast"),
    ("CLEPSYDRA_SCHEDULER_BATCH", "10001"),  # past the store's largest hand-over
    ("CLEPSYDRA_SCHEDULER_CONCURRENCY", "3"), ("CLEPSYDRA_DELAY_LEVELS", "1s 2x"),
    ("CLEPSYDRA_SCHEDULER_CONCURRENCY", "4"),  # 3 levels + the timers' run (SPEC T1)
    ("CLEPSYDRA_SCHEDULER_WORKER_ID", "a b"), ("CLEPSYDRA_SCHEDULER_POD_NAME", "x" * 128),
    ("CLEPSYDRA_SCHEDULER_BACKOFF_S", "0"),  # a failing store would be called in a spin
])
def test_a_bad_value_stops_start_up_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        SchedulerSettings.from_env({"CLEPSYDRA_DELAY_LEVELS": "1s 2s 3s", name: value})


def test_beat_has_one_expiring_keepalive_per_level_on_its_own_queue() -> None:
    settings = SchedulerSettings.from_env({"CLEPSYDRA_DELAY_LEVELS": "1s 5s 2h",
                                           "CLEPSYDRA_SCHEDULER_KEEPALIVE_S": "5"})
    schedule = beat_schedule(settings)
    assert len(schedule) == 4  # the three levels and the timers (SPEC T1)
    assert schedule["deliver-timers"]["options"] == {"queue": "schedule.timers", "expires": 5.0}
    for level in (1, 2, 3):
        entry = schedule[f"deliver-level-{level}"]
        assert entry["task"] == "clepsydra_scheduler.deliver_level"
        assert entry["args"] == (level,)
        assert entry["schedule"] == 5.0
        assert entry["options"] == {"queue": schedule_queue_name(level), "expires": 5.0}
    # the order a worker takes their tasks in (DEC-scheduler-restart-kick)
    assert level_queues(settings) == ["schedule.timers", "schedule.level.1", "schedule.level.2",
                                      "schedule.level.3"]


def test_create_celery_uses_the_redis_broker_and_registers_the_task() -> None:
    settings = SchedulerSettings.from_env({"CLEPSYDRA_DELAY_LEVELS": "1s 2s",
                                           "CLEPSYDRA_REDIS_PORT": "7001"})
    app = create_celery(settings)
    assert app.conf.broker_url == "redis://127.0.0.1:7001/0"
    assert "clepsydra_scheduler.deliver_level" in app.tasks
    assert "clepsydra_scheduler.deliver_timers" in app.tasks
    assert set(app.conf.beat_schedule) == {"deliver-level-1", "deliver-level-2",
                                           "deliver-timers"}


def test_the_worker_name_is_its_pod_and_worker_id_the_same_across_restarts() -> None:
    # DEC-scheduler-lease: a restarted process of the same pod (or make run slot) has the same
    # name, so it takes its own leases back at once; Kubernetes sets the pod's name
    env = {"CLEPSYDRA_SCHEDULER_POD_NAME": "clepsydra-scheduler-worker-7d9f-x2x",
           "CLEPSYDRA_SCHEDULER_WORKER_ID": "w1"}
    assert SchedulerSettings.from_env(env).worker_name == \
        SchedulerSettings.from_env(dict(env)).worker_name == \
        "clepsydra-scheduler-worker-7d9f-x2x/w1"
