"""AutoscaleSettings: the worker autoscaler's settings (``python -m clepsydra_scheduler
autoscale``), read once from the environment. Its own dataclass beside SchedulerSettings: the
autoscaler runs none of the Celery side and needs none of its settings.

| variable | meaning | default |
|---|---|---|
| ``CLEPSYDRA_AUTOSCALE_MIN`` / ``_MAX`` | fewest / most scheduler workers | 1 / 4 |
| ``CLEPSYDRA_AUTOSCALE_COOLDOWN_S`` | no scaling down sooner than this after a change | 300 |
| ``CLEPSYDRA_AUTOSCALE_INTERVAL_S`` | how often the levels are read and a decision made | 15 |
| ``CLEPSYDRA_AUTOSCALE_BACKLOG_PER_WORKER`` | entries in due levels one worker is for | 50000 |
| ``CLEPSYDRA_AUTOSCALE_LEVELS_PER_WORKER`` | due levels that share one worker | 4 |
| ``CLEPSYDRA_AUTOSCALE_LAG_TARGET_MS`` | a level later than this gets a worker of its own | 2000 |
| ``CLEPSYDRA_AUTOSCALE_DEPLOYMENT`` | the Deployment scaled | clepsydra-scheduler-worker |
| ``CLEPSYDRA_AUTOSCALE_NAMESPACE`` | its namespace (in a pod: the pod's own) | default |
| ``CLEPSYDRA_AUTOSCALE_PORT`` | the autoscaler's ``/healthz`` (0: none) | 8086 |
| ``CLEPSYDRA_AUTOSCALE_BIND`` | the address it listens on | 127.0.0.1 |
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.settings import CommonSettings, Env, env_float, env_int, env_str
from clepsydra_scheduler.autoscale import ScalePolicy

_PREFIX = "CLEPSYDRA_AUTOSCALE_"
WORKER_DEPLOYMENT = "clepsydra-scheduler-worker"


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    common: CommonSettings
    policy: ScalePolicy
    interval_s: float = 15.0
    deployment: str = WORKER_DEPLOYMENT
    namespace: str = "default"
    port: int | None = 8086
    bind: str = "127.0.0.1"
    store_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, env: Env | None = None) -> AutoscaleSettings:
        env = os.environ if env is None else env
        min_replicas = env_int(env, _PREFIX + "MIN", 1, minimum=0)
        max_replicas = env_int(env, _PREFIX + "MAX", 4, minimum=1)
        if max_replicas < min_replicas:
            raise ConfigError(f"{_PREFIX}MAX={max_replicas} must be at least "
                              f"{_PREFIX}MIN={min_replicas}")
        policy = ScalePolicy(
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            cooldown_s=env_float(env, _PREFIX + "COOLDOWN_S", 300.0, minimum=0.0),
            backlog_per_worker=env_int(env, _PREFIX + "BACKLOG_PER_WORKER", 50_000, minimum=1),
            levels_per_worker=env_int(env, _PREFIX + "LEVELS_PER_WORKER", 4, minimum=1),
            lag_target_ms=env_int(env, _PREFIX + "LAG_TARGET_MS", 2_000, minimum=0),
        )
        port = env_int(env, _PREFIX + "PORT", 8086, minimum=0, maximum=65_535)
        return cls(
            common=CommonSettings.from_env(env),
            policy=policy,
            interval_s=env_float(env, _PREFIX + "INTERVAL_S", 15.0, minimum=0.1),
            deployment=env_str(env, _PREFIX + "DEPLOYMENT", WORKER_DEPLOYMENT),
            namespace=env_str(env, _PREFIX + "NAMESPACE", "default"),
            port=port or None,
            bind=env_str(env, _PREFIX + "BIND", "127.0.0.1"),
        )

    @property
    def levels(self) -> DelayLevels:
        return self.common.delay_levels
