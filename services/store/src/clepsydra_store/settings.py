"""StoreSettings: the store service's settings, read once from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import ConfigError
from clepsydra_core.settings import (
    AUTH_ADMIN_TOKEN_VAR,
    CommonSettings,
    Env,
    env_bool,
    env_choice,
    env_duration_ms,
    env_float,
    env_int,
    env_str,
)
from clepsydra_core.shards import ClusterShape
from clepsydra_core.wire.timers import MAX_DELAY_MS
from clepsydra_store.engine.config import (
    DEFAULT_KEY_INDEX_ENTRIES_PER_FILE,
    DEFAULT_TIMER_HANDOVER_GAP_MS,
    DEFAULT_TIMER_MAX_DELAY_MS,
    DEFAULT_TIMER_STAGE_AHEAD_MS,
    TIMER_MAX_DELAY_VAR,
    EngineConfig,
)
from clepsydra_store.engine.log.disk_usage import (
    DISK_CAPACITY_VAR,
    DISK_MAX_RATIO_VAR,
    DISK_WARN_RATIO_VAR,
)

MAX_REQUEST_BYTES_VAR = "CLEPSYDRA_STORE_MAX_REQUEST_BYTES"
"""The setting that bounds a request body (named in the 413 answer)."""
PULL_HOLD_MAX_VAR = "CLEPSYDRA_STORE_PULL_HOLD_MAX"
DEFAULT_PULL_HOLD_MAX = 4
"""Half of the default 8 server threads: the timers' hand-over waits in one too, and the
others answer every other request."""



def _ratio(env: Env, name: str, default: float) -> float:
    """A share of the disk: above 0, at most 1."""
    value = env_float(env, name, default, minimum=0.0)
    if not 0 < value <= 1:
        raise ConfigError(f"{name}={value:g} must be above 0 and at most 1")
    return value


DEFAULT_POLLER_SPIN_US = 300
"""``CLEPSYDRA_STORE_POLLER_SPIN_US`` (DEC-poller-spin): 150 µs before, too short for the SDK's
turn between two sends on a slower machine of the kind."""

@dataclass(frozen=True, slots=True)
class StoreSettings:
    common: CommonSettings
    engine: EngineConfig
    port: int
    bind: str
    threads: int
    consumer_expiry_ms: int = 30_000
    """A consumer that has not heartbeated for this long is dropped from its group (C1, C5)."""
    max_request_bytes: int = 64 * 1024 * 1024
    """Largest HTTP request body accepted (413 above); a single message body is bounded by
    ``engine.max_body_bytes`` (P1)."""
    keepalive_s: int = 75
    """How long an idle keep-alive connection stays open."""
    fast_path: bool = True
    """Serve the two produce routes and the timers' hand-over through the lean WSGI path (same
    behaviour as Flask's)."""
    inline_produce: bool = True
    """With the fast path and async flush: the worker's poller thread answers produce requests
    on kept-alive connections itself (inline.py, DEC-poller-produce)."""
    poller_spin_us: int = DEFAULT_POLLER_SPIN_US
    """With inline produce: after answering one, the poller looks for the next request
    without sleeping for this long (DEC-poller-spin: a sleep and wake-up between a producer's calls
    cost as much as the answer)."""
    lock_expiry_ms: int = 60_000
    """An orderly consumer's queue lock not renewed for this long is free for another
    consumer (RocketMQ's 60 s)."""
    pull_hold_max: int = DEFAULT_PULL_HOLD_MAX
    """Most pulls held at once (``waitMs``, DEC-pull-hold): each waits in one of the ``threads``
    server threads; past it a pull answers at once. 0: no pull is held."""
    cluster: ClusterShape = field(default_factory=ClusterShape)
    """Which store shard this is and where its peers answer (DEC-store-shards;
    ``CLEPSYDRA_STORE_SHARDS``, ``_SHARD_ID``, ``_PEERS``): one shard by default."""
    peer_token: str | None = field(default=None, repr=False)
    """The token of this store's own calls to its peers when no caller's is at hand (a new
    shard reading the topics it lacks): CLEPSYDRA_TOKEN, else the bootstrap admin token."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> StoreSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        port = env_int(env, "CLEPSYDRA_STORE_PORT", 8081, minimum=1)
        data_dir = Path(env_str(env, "CLEPSYDRA_STORE_DIR", str(common.home / "store"))).absolute()
        consumequeue_dir = Path(env_str(env, "CLEPSYDRA_STORE_CONSUMEQUEUE_DIR",
                                        str(data_dir / naming.CONSUMEQUEUE_DIR))).absolute()
        cluster = ClusterShape.from_env(env, common.store_url)
        engine = EngineConfig(
            data_dir=data_dir,
            consumequeue_dir=consumequeue_dir,
            store_host=env_str(env, "CLEPSYDRA_STORE_HOST", f"127.0.0.1:{port}"),
            shard_id=cluster.shard_id,
            delay_levels=common.delay_levels,
            segment_size_bytes=env_int(env, "CLEPSYDRA_STORE_SEGMENT_BYTES", 1 << 30,
                                       minimum=64 * 1024),
            cq_entries_per_file=env_int(env, "CLEPSYDRA_STORE_CQ_ENTRIES_PER_FILE", 300_000,
                                        minimum=16),
            key_index_entries_per_file=env_int(env, "CLEPSYDRA_STORE_KEY_INDEX_ENTRIES_PER_FILE",
                                               DEFAULT_KEY_INDEX_ENTRIES_PER_FILE, minimum=16,
                                               maximum=2**32 - 1),
            flush=env_choice(env, "CLEPSYDRA_FLUSH", "async", ("async", "sync")),
            flush_interval_ms=env_int(env, "CLEPSYDRA_STORE_FLUSH_INTERVAL_MS", 500, minimum=1),
            retention_hours=env_float(env, "CLEPSYDRA_STORE_RETENTION_HOURS", 72.0,
                                      minimum=0.01),
            max_body_bytes=env_int(env, "CLEPSYDRA_STORE_MAX_BODY_BYTES", 4 * 1024 * 1024,
                                   minimum=1),
            writable=env_bool(env, "CLEPSYDRA_STORE_WRITABLE", True),
            disk_max_ratio=_ratio(env, DISK_MAX_RATIO_VAR, 0.90),
            disk_warn_ratio=_ratio(env, DISK_WARN_RATIO_VAR, 0.85),
            disk_capacity_bytes=env_int(env, DISK_CAPACITY_VAR, 0, minimum=0),
            timer_max_delay_ms=env_duration_ms(env, TIMER_MAX_DELAY_VAR,
                                               DEFAULT_TIMER_MAX_DELAY_MS, minimum=1,
                                               maximum=MAX_DELAY_MS),
            timer_handover_gap_ms=env_int(env, "CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS",
                                          DEFAULT_TIMER_HANDOVER_GAP_MS, minimum=0,
                                          maximum=100),  # T1: within 100 ms
            timer_stage_ahead_ms=env_int(env, "CLEPSYDRA_STORE_TIMER_STAGE_AHEAD_MS",
                                         DEFAULT_TIMER_STAGE_AHEAD_MS, minimum=0,
                                         maximum=60_000),
        )
        if engine.disk_warn_ratio > engine.disk_max_ratio:
            raise ConfigError(f"{DISK_WARN_RATIO_VAR}={engine.disk_warn_ratio:g} must not be "
                              f"above {DISK_MAX_RATIO_VAR}={engine.disk_max_ratio:g}")
        threads = env_int(env, "CLEPSYDRA_STORE_THREADS", 8, minimum=1)
        pull_hold_max = env_int(env, PULL_HOLD_MAX_VAR, min(DEFAULT_PULL_HOLD_MAX, threads // 2),
                                minimum=0)
        if pull_hold_max >= threads:
            raise ConfigError(f"{PULL_HOLD_MAX_VAR}={pull_hold_max} must be below "
                              f"CLEPSYDRA_STORE_THREADS={threads}: held pulls wait in those "
                              "threads, and other requests need one")
        return cls(
            common=common,
            engine=engine,
            port=port,
            bind=env_str(env, "CLEPSYDRA_STORE_BIND", "127.0.0.1"),
            threads=threads,
            consumer_expiry_ms=env_int(env, "CLEPSYDRA_STORE_CONSUMER_EXPIRY_MS", 30_000,
                                       minimum=1),
            max_request_bytes=env_int(env, MAX_REQUEST_BYTES_VAR,
                                      max(64 << 20, 2 * engine.max_body_bytes + (1 << 20)),
                                      minimum=1024),
            keepalive_s=env_int(env, "CLEPSYDRA_STORE_KEEPALIVE_S", 75, minimum=1),
            fast_path=env_bool(env, "CLEPSYDRA_STORE_FAST_PATH", True),
            inline_produce=env_bool(env, "CLEPSYDRA_STORE_INLINE_PRODUCE", True),
            poller_spin_us=env_int(env, "CLEPSYDRA_STORE_POLLER_SPIN_US", DEFAULT_POLLER_SPIN_US,
                                   minimum=0, maximum=10_000),
            lock_expiry_ms=round(1000 * env_float(env, "CLEPSYDRA_STORE_LOCK_EXPIRY_S", 60.0,
                                                  minimum=0.1)),
            pull_hold_max=pull_hold_max,
            cluster=cluster,
            peer_token=common.token or env.get(AUTH_ADMIN_TOKEN_VAR) or None,
        )
