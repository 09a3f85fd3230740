"""Worker autoscaling decisions (autoscale.py) as plain functions, what the autoscaler reads from
the store, its settings, and one loop step (autoscaler.py) over the in-memory store twin."""

from __future__ import annotations

import pytest

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_scheduler.autoscale import (
    LevelLoad,
    ScalePolicy,
    ScaleReason,
    decide,
    level_loads,
    needed_replicas,
)
from clepsydra_scheduler.autoscale_settings import AutoscaleSettings
from clepsydra_scheduler.autoscaler import Autoscaler, Heartbeat
from tests.fixtures.scheduler import FakeClock, FakeStore
from tests.unit.scheduler.conftest import DELAYS_MS

POLICY = ScalePolicy(min_replicas=1, max_replicas=6, cooldown_s=300.0, backlog_per_worker=1_000,
                     levels_per_worker=4, lag_target_ms=2_000)


def due(level: int, backlog: int = 10, lag_ms: int = 100) -> LevelLoad:
    return LevelLoad(level, backlog, lag_ms, due=True)


def waiting(level: int, backlog: int) -> LevelLoad:
    """Entries parked in a level, none due yet."""
    return LevelLoad(level, backlog, 0, due=False)


# ---- what the due work needs ------------------------------------------------------------------

def test_nothing_due_needs_no_worker_however_much_waits() -> None:
    assert needed_replicas([waiting(18, 5_000_000), waiting(3, 40_000)], POLICY) == 0


def test_due_levels_share_a_worker_up_to_levels_per_worker() -> None:
    assert needed_replicas([due(lv) for lv in range(1, 5)], POLICY) == 1
    assert needed_replicas([due(lv) for lv in range(1, 6)], POLICY) == 2


def test_a_late_level_gets_a_worker_of_its_own() -> None:
    loads = [due(1, lag_ms=5_000), due(2, lag_ms=2_001), due(3), due(4)]
    # two late levels alone, the other two share one
    assert needed_replicas(loads, POLICY) == 3


def test_backlog_of_due_levels_asks_one_worker_per_backlog_per_worker() -> None:
    assert needed_replicas([due(1, backlog=3_500)], POLICY) == 4
    # the backlog of levels not due does not count
    assert needed_replicas([due(1, backlog=500), waiting(2, 100_000)], POLICY) == 1


# ---- decisions --------------------------------------------------------------------------------

def test_scales_up_at_once_to_what_due_work_needs() -> None:
    decision = decide([due(1, backlog=2_500)], 1, POLICY, now_s=10.0, last_change_s=5.0)
    assert (decision.desired, decision.reason, decision.changed) == (3, ScaleReason.UP, True)


def test_never_above_max_and_says_so() -> None:
    decision = decide([due(1, backlog=50_000)], 2, POLICY, now_s=0.0, last_change_s=None)
    assert (decision.desired, decision.needed, decision.reason) == (6, 50, ScaleReason.AT_MAX)
    steady = decide([due(1, backlog=50_000)], 6, POLICY, now_s=0.0, last_change_s=None)
    assert (steady.desired, steady.reason, steady.changed) == (6, ScaleReason.AT_MAX, False)


def test_never_below_min_even_when_idle() -> None:
    policy = ScalePolicy(min_replicas=2, max_replicas=6, cooldown_s=0.0)
    decision = decide([], 5, policy, now_s=100.0, last_change_s=None)
    assert (decision.desired, decision.reason) == (2, ScaleReason.DOWN)
    assert decide([], 0, policy, now_s=100.0, last_change_s=None).desired == 2


def test_scale_down_waits_for_the_cooldown_after_a_change() -> None:
    loads = [due(1, backlog=100)]
    held = decide(loads, 4, POLICY, now_s=1_000.0, last_change_s=1_000.0 - 299.0)
    assert (held.desired, held.reason, held.changed) == (4, ScaleReason.COOLDOWN, False)
    assert held.needed == 1
    after = decide(loads, 4, POLICY, now_s=1_000.0, last_change_s=1_000.0 - 300.0)
    assert (after.desired, after.reason) == (1, ScaleReason.DOWN)


def test_cooldown_never_holds_back_a_scale_up() -> None:
    decision = decide([due(1, backlog=3_000)], 1, POLICY, now_s=10.0, last_change_s=9.0)
    assert (decision.desired, decision.reason) == (3, ScaleReason.UP)


def test_scale_down_stops_at_what_due_work_needs() -> None:
    loads = [due(1, lag_ms=10_000), due(2, lag_ms=10_000), due(3)]
    decision = decide(loads, 6, POLICY, now_s=1_000.0, last_change_s=None)
    assert (decision.desired, decision.reason) == (3, ScaleReason.DOWN)


def test_replicas_set_by_hand_above_max_come_down_without_waiting() -> None:
    decision = decide([], 9, POLICY, now_s=10.0, last_change_s=9.0)
    assert (decision.desired, decision.reason) == (1, ScaleReason.DOWN)


def test_steady_when_the_workers_match_the_work() -> None:
    decision = decide([due(1), due(2)], 1, POLICY, now_s=10.0, last_change_s=None)
    assert (decision.desired, decision.reason, decision.changed) == (1, ScaleReason.STEADY, False)


def test_policy_rejects_bounds_upside_down() -> None:
    with pytest.raises(ValueError, match="min_replicas"):
        ScalePolicy(min_replicas=3, max_replicas=2)


# ---- what is read from the store --------------------------------------------------------------

def test_level_loads_reads_backlog_and_lag_of_the_oldest_entry() -> None:
    clock = FakeClock()
    store = FakeStore(DELAYS_MS, clock.now_ms)
    levels = DelayLevels.parse("1s 2s 3s")
    now = clock.now_ms()
    store.park(1, "late", deliver_ts=now - 1_500)
    store.park(1, "later", deliver_ts=now + 500)
    store.park(3, "future", deliver_ts=now + 2_000)
    loads = {load.level: load for load in level_loads(store, levels, now)}
    assert loads[1] == LevelLoad(1, backlog=2, lag_ms=1_500, due=True)
    assert loads[2] == LevelLoad(2, backlog=0, lag_ms=0, due=False)
    assert loads[3] == LevelLoad(3, backlog=1, lag_ms=0, due=False)


def test_level_loads_counts_only_entries_not_handed_over() -> None:
    clock = FakeClock()
    store = FakeStore(DELAYS_MS, clock.now_ms)
    levels = DelayLevels.parse("1s 2s 3s")
    now = clock.now_ms()
    for i in range(3):
        store.park(2, f"m{i}", deliver_ts=now - 100)
    store.handover(2, 0, 2)
    (load,) = [load for load in level_loads(store, levels, now) if load.level == 2]
    assert (load.backlog, load.due, load.lag_ms) == (1, True, 100)


# ---- settings ---------------------------------------------------------------------------------

def test_settings_read_every_variable() -> None:
    settings = AutoscaleSettings.from_env({
        "CLEPSYDRA_AUTOSCALE_MIN": "2", "CLEPSYDRA_AUTOSCALE_MAX": "9",
        "CLEPSYDRA_AUTOSCALE_COOLDOWN_S": "60", "CLEPSYDRA_AUTOSCALE_INTERVAL_S": "5",
        "CLEPSYDRA_AUTOSCALE_BACKLOG_PER_WORKER": "7000",
        "CLEPSYDRA_AUTOSCALE_LEVELS_PER_WORKER": "3", "CLEPSYDRA_AUTOSCALE_LAG_TARGET_MS": "900",
        "CLEPSYDRA_AUTOSCALE_DEPLOYMENT": "w", "CLEPSYDRA_AUTOSCALE_NAMESPACE": "ns",
        "CLEPSYDRA_AUTOSCALE_PORT": "0", "CLEPSYDRA_AUTOSCALE_BIND": "0.0.0.0"})
    assert settings.policy == ScalePolicy(min_replicas=2, max_replicas=9, cooldown_s=60.0,
                                          backlog_per_worker=7_000, levels_per_worker=3,
                                          lag_target_ms=900)
    assert (settings.interval_s, settings.deployment, settings.namespace, settings.port,
            settings.bind) == (5.0, "w", "ns", None, "0.0.0.0")


def test_settings_defaults() -> None:
    settings = AutoscaleSettings.from_env({})
    assert settings.policy == ScalePolicy()
    assert (settings.deployment, settings.port) == ("clepsydra-scheduler-worker", 8086)


@pytest.mark.parametrize(("env", "named"), [
    ({"CLEPSYDRA_AUTOSCALE_MIN": "3", "CLEPSYDRA_AUTOSCALE_MAX": "2"}, "CLEPSYDRA_AUTOSCALE_MAX"),
    ({"CLEPSYDRA_AUTOSCALE_MAX": "0"}, "CLEPSYDRA_AUTOSCALE_MAX"),
    ({"CLEPSYDRA_AUTOSCALE_COOLDOWN_S": "soon"}, "CLEPSYDRA_AUTOSCALE_COOLDOWN_S"),
    ({"CLEPSYDRA_AUTOSCALE_LEVELS_PER_WORKER": "0"}, "CLEPSYDRA_AUTOSCALE_LEVELS_PER_WORKER"),
])
def test_bad_settings_stop_startup_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        AutoscaleSettings.from_env(env)


# ---- one step of the loop ---------------------------------------------------------------------

class Replicas:
    """The scale being set, in memory (the Kubernetes side is tested over HTTP elsewhere)."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.patches: list[int] = []

    def read_replicas(self) -> int:
        return self.replicas

    def set_replicas(self, replicas: int) -> int:
        self.patches.append(replicas)
        self.replicas = replicas
        return replicas


def test_step_scales_up_then_holds_through_the_cooldown_then_down() -> None:
    clock = FakeClock()
    store = FakeStore(DELAYS_MS, clock.now_ms)
    levels = DelayLevels.parse("1s 2s 3s")
    seconds = [0.0]
    target = Replicas(1)
    autoscaler = Autoscaler(POLICY, levels, store, target, now_s=lambda: seconds[0],
                            now_ms=clock.now_ms)
    now = clock.now_ms()
    for i in range(2_500):
        store.park(1, f"m{i}", deliver_ts=now - 10)
    first = autoscaler.step()
    assert first is not None and first.reason == ScaleReason.UP
    assert target.patches == [3]

    store.handover(1, 0, 2_500)  # the workers caught up
    seconds[0] = 100.0
    held = autoscaler.step()
    assert held is not None and held.reason == ScaleReason.COOLDOWN
    assert target.patches == [3]

    seconds[0] = 301.0
    down = autoscaler.step()
    assert down is not None and down.reason == ScaleReason.DOWN
    assert target.patches == [3, 1]


def test_step_changes_nothing_when_the_store_does_not_answer() -> None:
    clock = FakeClock()
    store = FakeStore(DELAYS_MS, clock.now_ms)
    store.down = True
    target = Replicas(3)
    autoscaler = Autoscaler(POLICY, DelayLevels.parse("1s 2s 3s"), store, target,
                            now_s=lambda: 0.0, now_ms=clock.now_ms)
    assert autoscaler.step() is None
    assert target.patches == []


def test_heartbeat_goes_stale_when_the_loop_stops_ticking() -> None:
    seconds = [0.0]
    heartbeat = Heartbeat(stale_after_s=45.0, now_s=lambda: seconds[0])
    assert not heartbeat.healthy()
    heartbeat.tick()
    seconds[0] = 45.0
    assert heartbeat.healthy()
    seconds[0] = 45.1
    assert not heartbeat.healthy()


def test_autoscale_command_with_a_bad_setting_exits_2_naming_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from clepsydra_scheduler.__main__ import main

    monkeypatch.setenv("CLEPSYDRA_AUTOSCALE_MAX", "none")
    assert main(["autoscale"]) == 2
    assert "CLEPSYDRA_AUTOSCALE_MAX" in capsys.readouterr().err


def test_the_loop_survives_a_refusing_api_server_and_keeps_its_heartbeat() -> None:
    import threading

    from clepsydra_scheduler.autoscaler import run
    from clepsydra_scheduler.kube import KubeCallFailed

    class Refusing(Replicas):
        def read_replicas(self) -> int:
            raise KubeCallFailed("read scale: 403 Forbidden")

    clock = FakeClock()
    store = FakeStore(DELAYS_MS, clock.now_ms)
    stop = threading.Event()
    ticks = [0.0]
    heartbeat = Heartbeat(stale_after_s=1.0, now_s=lambda: ticks[0])

    class Counting(Autoscaler):
        def step(self) -> None:  # type: ignore[override]
            ticks[0] += 1.0
            if ticks[0] >= 3:
                stop.set()
            super().step()

    run(Counting(POLICY, DelayLevels.parse("1s 2s 3s"), store, Refusing(1), now_s=lambda: 0.0,
                 now_ms=clock.now_ms), 0.0, stop, heartbeat)
    assert ticks[0] == 3 and heartbeat.healthy()
