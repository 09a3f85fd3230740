"""RetrySettings: the retry service's settings, read once from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from clepsydra_core.levels import DelayLevels
from clepsydra_core.settings import CommonSettings, Env, env_float, env_int, env_str

MAX_REQUEST_BYTES_VAR = "CLEPSYDRA_RETRY_MAX_REQUEST_BYTES"


@dataclass(frozen=True, slots=True)
class RetrySettings:
    common: CommonSettings
    port: int
    bind: str
    workers: int
    """gunicorn worker processes (the service is stateless: any number works)."""
    threads: int
    store_timeout_s: float
    writable_ttl_ms: int
    """How long the store's ``writable`` answer (R2) is trusted before asking again."""
    history_max: int
    """Failure-history entries kept per message (newest first to go)."""
    resend_batch: int
    """Messages per store copy call when resending from the DLQ."""
    audit_max: int
    """Audit records kept per group (oldest dropped)."""
    max_request_bytes: int
    """Largest request body (413 BODY_TOO_LARGE above it, naming the variable,
    DEC-too-large-413)."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> RetrySettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        return cls(
            common=common,
            port=env_int(env, "CLEPSYDRA_RETRY_PORT", 8082, minimum=1),
            bind=env_str(env, "CLEPSYDRA_RETRY_BIND", "127.0.0.1"),
            workers=env_int(env, "CLEPSYDRA_RETRY_WORKERS", 1, minimum=1),
            threads=env_int(env, "CLEPSYDRA_RETRY_THREADS", 8, minimum=1),
            store_timeout_s=env_float(env, "CLEPSYDRA_RETRY_STORE_TIMEOUT_S", 30.0,
                                      minimum=0.1),
            writable_ttl_ms=env_int(env, "CLEPSYDRA_RETRY_WRITABLE_TTL_MS", 1000, minimum=0),
            history_max=env_int(env, "CLEPSYDRA_RETRY_HISTORY_MAX", 32, minimum=1),
            resend_batch=env_int(env, "CLEPSYDRA_RETRY_RESEND_BATCH", 1000, minimum=1,
                                 maximum=1000),  # the store's copy calls take at most 1000
            audit_max=env_int(env, "CLEPSYDRA_RETRY_AUDIT_MAX", 10_000, minimum=1),
            max_request_bytes=env_int(env, MAX_REQUEST_BYTES_VAR, 16 << 20, minimum=1024),
        )

    @classmethod
    def for_test(cls, store_url: str, redis_url: str, **overrides: object) -> RetrySettings:
        """Settings built directly (tests), with the given store and Redis."""
        env = {"CLEPSYDRA_STORE_URL": store_url, "CLEPSYDRA_REDIS_URL": redis_url}
        env.update({k: str(v) for k, v in overrides.items()})
        return cls.from_env(env)

    @property
    def store_url(self) -> str:
        return self.common.store_url.rstrip("/")

    @property
    def redis_url(self) -> str:
        return self.common.effective_redis_url

    @property
    def delay_levels(self) -> DelayLevels:
        return self.common.delay_levels
