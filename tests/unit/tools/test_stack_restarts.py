"""The local stack's restart policy: a child that dies is restarted after a
back-off that doubles, and given up on after too many deaths within the window."""

from __future__ import annotations

from tools.stack import RESTART_BACKOFF_MAX_S, RestartPolicy


def test_backoff_doubles_up_to_its_cap() -> None:
    policy = RestartPolicy(max_restarts=10, window_s=1_000)
    delays = [policy.on_exit(float(t)) for t in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert max(d for d in delays if d is not None) == RESTART_BACKOFF_MAX_S


def test_gives_up_after_max_restarts_within_the_window() -> None:
    policy = RestartPolicy(max_restarts=5, window_s=60)
    assert all(policy.on_exit(float(t)) is not None for t in range(5))
    assert policy.on_exit(5.0) is None
    assert policy.recent_deaths == 6


def test_deaths_outside_the_window_are_forgotten() -> None:
    policy = RestartPolicy(max_restarts=2, window_s=60)
    assert policy.on_exit(0.0) == 0.5
    assert policy.on_exit(10.0) == 1.0
    # a minute later the first two no longer count: back to the first back-off
    assert policy.on_exit(100.0) == 0.5
    assert policy.on_exit(101.0) == 1.0
    assert policy.on_exit(102.0) is None
