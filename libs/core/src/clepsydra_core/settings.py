"""Reading settings from the environment, and the settings every part agrees on
(docs/configuration.md).

Each service has one frozen settings dataclass built once by ``from_env()``; these helpers read
one variable each and raise ConfigError naming the variable. Nothing else reads os.environ.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_core.errors import ConfigError
from clepsydra_core.levels import DEFAULT_LEVELS, DelayLevels, duration_ms

Env = Mapping[str, str]

LOG_JSON = "json"
LOG_TEXT = "text"
LOG_FORMATS = (LOG_JSON, LOG_TEXT)
"""The values of CLEPSYDRA_LOG_FORMAT (``clepsydra_core.runtime.logging`` writes them)."""


def env_str(env: Env, name: str, default: str) -> str:
    value = env.get(name, "")
    return value if value != "" else default


def env_int(env: Env, name: str, default: int, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from exc
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={value} must be at most {maximum}")
    return value


def env_duration_ms(env: Env, name: str, default_ms: int, *, minimum: int = 0,
                    maximum: int | None = None) -> int:
    """A duration setting: ``365d``, ``90m``, ``30s``, ``1500ms`` or plain ms."""
    raw = env.get(name, "")
    if raw == "":
        return default_ms
    value = duration_ms(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not a duration (a whole number of ms, or one "
                          "followed by ms, s, m, h or d: 365d, 90m)")
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum} ms")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={raw!r} must be at most {maximum} ms")
    return value


def env_float(env: Env, name: str, default: float, *, minimum: float | None = None,
              maximum: float | None = None) -> float:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={value} must be at most {maximum}")
    return value


def env_bool(env: Env, name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (true/false)")


def env_choice(env: Env, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(env, name, default)
    if value not in choices:
        raise ConfigError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def env_levels(env: Env, name: str = "CLEPSYDRA_DELAY_LEVELS") -> DelayLevels:
    raw = env_str(env, name, DEFAULT_LEVELS)
    try:
        return DelayLevels.parse(raw)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc.message}") from exc


AUTH_VAR = "CLEPSYDRA_AUTH"
AUTH_TOKENS_FILE_VAR = "CLEPSYDRA_AUTH_TOKENS_FILE"
AUTH_ADMIN_TOKEN_VAR = "CLEPSYDRA_AUTH_ADMIN_TOKEN"
AUTH_RATE_VAR = "CLEPSYDRA_AUTH_RATE_PER_S"
TOKEN_VAR = "CLEPSYDRA_TOKEN"


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Access control at a service's edge (docs/access-control.md)."""

    enabled: bool = False
    tokens_file: Path | None = None
    admin_token: str | None = field(default=None, repr=False)
    rate_per_s: float = 0.0
    """Requests a second each client token may send (0: no limit; a token's own ``ratePerS``
    wins; the service roles are never limited)."""

    @classmethod
    def from_env(cls, env: Env, home: Path) -> AuthSettings:
        enabled = env_choice(env, AUTH_VAR, "off", ("off", "on")) == "on"
        raw_file = env.get(AUTH_TOKENS_FILE_VAR, "")
        admin = env.get(AUTH_ADMIN_TOKEN_VAR) or None
        tokens_file = Path(raw_file).absolute() if raw_file else home / "tokens.json"
        if enabled and not raw_file and admin is None:
            raise ConfigError(f"{AUTH_VAR}=on needs {AUTH_TOKENS_FILE_VAR} or "
                              f"{AUTH_ADMIN_TOKEN_VAR}")
        return cls(enabled=enabled, tokens_file=tokens_file, admin_token=admin,
                   rate_per_s=env_float(env, AUTH_RATE_VAR, 0.0, minimum=0.0))


def client_token(env: Env | None = None) -> str | None:
    """The token a client or a service sends on its own calls (``CLEPSYDRA_TOKEN``)."""
    env = os.environ if env is None else env
    return env.get(TOKEN_VAR) or None


SINGLE_PROCESS = "CLEPSYDRA_SINGLE_PROCESS"


@dataclass(frozen=True, slots=True)
class CommonSettings:
    """The settings shared by every part (docs/configuration.md)."""

    home: Path
    store_url: str
    retry_url: str
    redis_url: str | None
    redis_port: int
    delay_levels: DelayLevels
    otel_exporter: str
    log_level: str
    log_format: str = LOG_JSON
    """CLEPSYDRA_LOG_FORMAT: ``json`` lines (the default) or ``text`` for people."""
    auto_create_groups: bool = True
    """A consumer group is created with default settings the first time it is seen (a
    heartbeat or a send-back), as RocketMQ's broker does by default."""
    auth: AuthSettings = AuthSettings()
    """Who may call this service (docs/access-control.md)."""
    token: str | None = field(default=None, repr=False)
    """The token this part sends on its own calls (CLEPSYDRA_TOKEN)."""
    single_process: bool = False
    """CLEPSYDRA_SINGLE_PROCESS: the store, the retry service and the analytics API run their
    one gunicorn worker in their own process, without a master (``make run``;
    DEC-memory-at-rest)."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> CommonSettings:
        env = os.environ if env is None else env
        store_port = env_int(env, "CLEPSYDRA_STORE_PORT", 8081, minimum=1)
        home = Path(env_str(env, "CLEPSYDRA_HOME", "./.clepsydra")).absolute()
        retry_port = env_int(env, "CLEPSYDRA_RETRY_PORT", 8082, minimum=1)
        return cls(
            home=home,
            store_url=env_str(env, "CLEPSYDRA_STORE_URL", f"http://127.0.0.1:{store_port}"),
            retry_url=env_str(env, "CLEPSYDRA_RETRY_URL", f"http://127.0.0.1:{retry_port}"),
            redis_url=env.get("CLEPSYDRA_REDIS_URL") or None,
            redis_port=env_int(env, "CLEPSYDRA_REDIS_PORT", 6380, minimum=1),
            delay_levels=env_levels(env),
            otel_exporter=env_str(env, "CLEPSYDRA_OTEL_EXPORTER", "none"),
            log_level=env_str(env, "CLEPSYDRA_LOG_LEVEL", "INFO").upper(),
            log_format=env_choice(env, "CLEPSYDRA_LOG_FORMAT", LOG_JSON, LOG_FORMATS),
            auto_create_groups=env_bool(env, "CLEPSYDRA_AUTO_CREATE_GROUPS", True),
            auth=AuthSettings.from_env(env, home),
            token=client_token(env),
            single_process=env_bool(env, SINGLE_PROCESS, False),
        )

    @property
    def effective_redis_url(self) -> str:
        """The Redis to use: CLEPSYDRA_REDIS_URL, else the local stack's own on redis_port."""
        return self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0"
