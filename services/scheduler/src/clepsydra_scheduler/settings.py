"""SchedulerSettings: the scheduler's settings, read once from the environment.

The shared ``CLEPSYDRA_*`` names (README.md, Configuration) plus the scheduler's own:

| variable | meaning | default |
|---|---|---|
| ``CLEPSYDRA_SCHEDULER_KEEPALIVE_S`` | beat's keep-alive interval per level (and its expiry) | 5 |
| ``CLEPSYDRA_SCHEDULER_LEASE_S`` | a lease's time to live (renewed each iteration) | 10 |
| ``CLEPSYDRA_SCHEDULER_RUN_S`` | how long one task run delivers before re-enqueueing itself | 60 |
| ``CLEPSYDRA_SCHEDULER_BATCH`` | most entries read / handed over per store call (≤ 10000) | 10000 |
| ``CLEPSYDRA_SCHEDULER_POLL_MS`` | longest sleep when a level's queue is empty | 1000 |
| ``CLEPSYDRA_SCHEDULER_TIMER_INTERVAL_MS`` | next timer call after one with timers (0-100) | 20 |
| ``CLEPSYDRA_SCHEDULER_BACKOFF_S`` | longest SPEC D6 back-off (0.1 s first, doubling) | 0.5 |
| ``CLEPSYDRA_SCHEDULER_POD_NAME`` | a worker's pod (``metadata.name``) or machine | host name |
| ``CLEPSYDRA_SCHEDULER_WORKER_ID`` | which worker of that pod or machine | worker |
| ``CLEPSYDRA_SCHEDULER_CONCURRENCY`` | worker threads | shards * (levels + 1) + 3 |
| ``CLEPSYDRA_SCHEDULER_METRICS_PORT`` | Prometheus endpoint of a worker (unset: none) | unset |
| ``CLEPSYDRA_SCHEDULER_METRICS_BIND`` | address that endpoint listens on | 127.0.0.1 |
| ``CLEPSYDRA_SCHEDULER_STORE_TIMEOUT_S`` | read timeout of a store call | 10 |
| ``CLEPSYDRA_SCHEDULER_PORT`` | a worker's /healthz, /livez, /metrics (health.py; 0: none) | 8083 |
| ``CLEPSYDRA_SCHEDULER_BEAT_PORT`` | beat's /healthz, /livez (0: none) | 8084 |
| ``CLEPSYDRA_SCHEDULER_BIND`` | address both health endpoints listen on | 127.0.0.1 |
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.settings import CommonSettings, Env, env_float, env_int, env_str
from clepsydra_core.shards import shard_count
from clepsydra_core.wire.schedule import MAX_HANDOVER

_PREFIX = "CLEPSYDRA_SCHEDULER_"
WORKER_ID_VAR = _PREFIX + "WORKER_ID"
"""Which worker of its pod or machine (the local stack gives each its part's name)."""
_NAME_PART = re.compile(r"[A-Za-z0-9._:@-]{1,127}")
"""A pod, host or worker id in a worker's name: what a pod or host name may hold."""


def default_concurrency(levels: int, shards: int) -> int:
    """A worker's threads: one for each level's run and the timers' run of every store shard
    (DEC-store-shards), and three for keep-alives (levels + 4 with one shard)."""
    return shards * (levels + 1) + 3


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    common: CommonSettings
    keepalive_s: float = 5.0
    lease_s: float = 10.0
    run_s: float = 60.0
    batch: int = MAX_HANDOVER
    poll_ms: int = 1_000
    timer_interval_ms: int = 20
    backoff_s: float = 0.5
    """The longest D6 back-off (DEC-scheduler-store-retry): 0.1 s first, then doubling."""
    concurrency: int = 22
    metrics_port: int | None = None
    metrics_bind: str = "127.0.0.1"
    store_timeout_s: float = 10.0
    port: int | None = 8083
    """The worker's health endpoint (None: not served)."""
    beat_port: int | None = 8084
    """Beat's health endpoint (None: not served)."""
    bind: str = "127.0.0.1"
    pod_name: str = "localhost"
    worker_id: str = "worker"

    @classmethod
    def from_env(cls, env: Env | None = None) -> SchedulerSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        metrics_port = env_int(env, _PREFIX + "METRICS_PORT", 0, minimum=0)
        settings = cls(
            common=common,
            keepalive_s=env_float(env, _PREFIX + "KEEPALIVE_S", 5.0, minimum=0.1),
            lease_s=env_float(env, _PREFIX + "LEASE_S", 10.0, minimum=0.3),
            run_s=env_float(env, _PREFIX + "RUN_S", 60.0, minimum=0.1),
            batch=env_int(env, _PREFIX + "BATCH", MAX_HANDOVER, minimum=1,
                          maximum=MAX_HANDOVER),
            poll_ms=env_int(env, _PREFIX + "POLL_MS", 1_000, minimum=1),
            timer_interval_ms=env_int(env, _PREFIX + "TIMER_INTERVAL_MS", 20, minimum=0,
                                      maximum=100),
            backoff_s=env_float(env, _PREFIX + "BACKOFF_S", 0.5, minimum=0.01),
            concurrency=env_int(env, _PREFIX + "CONCURRENCY",
                                default_concurrency(common.delay_levels.max_level,
                                                    shard_count(env)), minimum=1),
            metrics_port=metrics_port or None,
            metrics_bind=env_str(env, _PREFIX + "METRICS_BIND", "127.0.0.1"),
            store_timeout_s=env_float(env, _PREFIX + "STORE_TIMEOUT_S", 10.0, minimum=0.1),
            port=env_int(env, _PREFIX + "PORT", 8083, minimum=0, maximum=65535) or None,
            beat_port=env_int(env, _PREFIX + "BEAT_PORT", 8084, minimum=0, maximum=65535) or None,
            bind=env_str(env, _PREFIX + "BIND", "127.0.0.1"),
            pod_name=_name_part(env, _PREFIX + "POD_NAME", _host_name()),
            worker_id=_name_part(env, WORKER_ID_VAR, "worker"),
        )
        if settings.concurrency <= common.delay_levels.max_level + 1:
            raise ConfigError(
                f"{_PREFIX}CONCURRENCY={settings.concurrency} must exceed the number of delay "
                f"levels plus one ({common.delay_levels.max_level + 1}): each level's run and "
                "the timers' run hold a thread, and keep-alives need free ones")
        if settings.port is not None and settings.port == settings.beat_port:
            raise ConfigError(f"{_PREFIX}PORT and {_PREFIX}BEAT_PORT are both {settings.port}: "
                              "a worker and beat on one machine would both listen there")
        return settings

    @property
    def levels(self) -> DelayLevels:
        return self.common.delay_levels

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1_000)

    @property
    def worker_name(self) -> str:
        """The worker's stable identity among the scheduler's workers: its pod (or machine)
        and its worker id, the same across a restart of its process (DEC-scheduler-lease)."""
        return f"{self.pod_name}/{self.worker_id}"

    @property
    def state_dir(self) -> Path:
        """Beat's schedule file and pid files (under CLEPSYDRA_HOME)."""
        return self.common.home / "scheduler"

    @property
    def beat_schedule_path(self) -> Path:
        return self.state_dir / "celerybeat-schedule"

    @property
    def beat_pid_path(self) -> Path:
        return self.state_dir / "beat.pid"


def _name_part(env: Env, name: str, default: str) -> str:
    value = env_str(env, name, default)
    if not _NAME_PART.fullmatch(value):
        raise ConfigError(f"{name}={value!r} must be 1-127 letters, digits or ._:@- (a pod or "
                          "host name, or a worker id)")
    return value


def _host_name() -> str:
    """This machine's name, as a name part (other characters become ``-``)."""
    return re.sub(r"[^A-Za-z0-9._:@-]", "-", socket.gethostname())[:127] or "localhost"
