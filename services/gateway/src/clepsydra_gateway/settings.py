"""GatewaySettings: the gateway's settings, read once from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.settings import CommonSettings, Env, env_float, env_int, env_str
from clepsydra_core.validation import DEFAULT_MAX_BODY_BYTES

PORT_VAR = "CLEPSYDRA_GATEWAY_PORT"
HEALTH_PORT_VAR = "CLEPSYDRA_GATEWAY_HEALTH_PORT"
DEFAULT_PORT = 8088
DEFAULT_HEALTH_PORT = 8089
MAX_INVISIBLE_S = 12 * 3600
"""The longest invisible time a receive or a change may ask for (RocketMQ's proxy: 12 h)."""
MAX_LONG_POLL_S = 60.0
"""The longest a receive is held (a client asking more is held this long)."""


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    common: CommonSettings
    port: int
    """The gRPC port (``CLEPSYDRA_GATEWAY_PORT``)."""
    bind: str
    health_port: int
    """``/healthz``, ``/livez``, ``/metrics`` (0: none)."""
    threads: int
    """gRPC handler threads: each open Telemetry stream and each long-polling receive holds one."""
    fifo_groups: tuple[str, ...]
    """Consumer groups (shell patterns) consumed in order: one message of a message group at a
    time, redelivered in place, dead-lettered after max attempts (DEC-gateway-fifo)."""
    long_poll_s: float
    """The long-polling time the gateway's Settings give a PushConsumer."""
    poll_ms: int
    """How often a held receive looks at the store again when no send or ack here woke it."""
    renew_s: int
    """A PushConsumer's messages (``auto_renew``) stay invisible this long, renewed while the
    client keeps talking to the gateway, up to ``consume_timeout_s``."""
    consume_timeout_s: int
    """SPEC R13: a message held longer comes back, renewed or not."""
    min_invisible_s: int
    """The shortest invisible time taken (RocketMQ's proxy: 10 s)."""
    max_body_bytes: int
    store_timeout_s: float
    store_retry_s: float
    """How long a send waits for a store that refuses connections (restarting) before it
    answers an error: nothing was sent, so trying again is safe."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        settings = cls(
            common=common,
            port=env_int(env, PORT_VAR, DEFAULT_PORT, minimum=1, maximum=65535),
            bind=env_str(env, "CLEPSYDRA_GATEWAY_BIND", "127.0.0.1"),
            health_port=env_int(env, HEALTH_PORT_VAR, DEFAULT_HEALTH_PORT, minimum=0,
                                maximum=65535),
            threads=env_int(env, "CLEPSYDRA_GATEWAY_THREADS", 64, minimum=4, maximum=4096),
            fifo_groups=tuple(p.strip() for p in
                              env_str(env, "CLEPSYDRA_GATEWAY_FIFO_GROUPS", "").split(",")
                              if p.strip()),
            long_poll_s=env_float(env, "CLEPSYDRA_GATEWAY_LONG_POLL_S", 20.0, minimum=1.0),
            poll_ms=env_int(env, "CLEPSYDRA_GATEWAY_POLL_MS", 100, minimum=5, maximum=5000),
            renew_s=env_int(env, "CLEPSYDRA_GATEWAY_RENEW_S", 30, minimum=1,
                            maximum=MAX_INVISIBLE_S),
            consume_timeout_s=env_int(env, "CLEPSYDRA_GATEWAY_CONSUME_TIMEOUT_S", 900,
                                      minimum=1),
            min_invisible_s=env_int(env, "CLEPSYDRA_GATEWAY_MIN_INVISIBLE_S", 1, minimum=1,
                                    maximum=MAX_INVISIBLE_S),
            max_body_bytes=env_int(env, "CLEPSYDRA_GATEWAY_MAX_BODY_BYTES",
                                   DEFAULT_MAX_BODY_BYTES, minimum=1, maximum=64 << 20),
            store_timeout_s=env_float(env, "CLEPSYDRA_GATEWAY_STORE_TIMEOUT_S", 10.0,
                                      minimum=0.1),
            store_retry_s=env_float(env, "CLEPSYDRA_GATEWAY_STORE_RETRY_S", 2.0, minimum=0.0),
        )
        if settings.health_port == settings.port:
            raise ConfigError(f"{HEALTH_PORT_VAR}={settings.health_port} must differ from "
                              f"{PORT_VAR}")
        if settings.long_poll_s > MAX_LONG_POLL_S:
            raise ConfigError(f"CLEPSYDRA_GATEWAY_LONG_POLL_S={settings.long_poll_s} must be "
                              f"at most {MAX_LONG_POLL_S:.0f}")
        return settings

    @classmethod
    def for_test(cls, store_url: str, retry_url: str, redis_url: str,
                 **overrides: object) -> GatewaySettings:
        env = {"CLEPSYDRA_STORE_URL": store_url, "CLEPSYDRA_RETRY_URL": retry_url,
               "CLEPSYDRA_REDIS_URL": redis_url, PORT_VAR: "1", HEALTH_PORT_VAR: "0"}
        env.update({k: str(v) for k, v in overrides.items()})
        return cls.from_env(env)

    @property
    def delay_levels(self) -> DelayLevels:
        return self.common.delay_levels
