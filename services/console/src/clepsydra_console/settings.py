"""ConsoleSettings: the console's settings, read once from the environment."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from clepsydra_core.errors import ConfigError
from clepsydra_core.settings import CommonSettings, Env, env_bool, env_float, env_int, env_str

PORT_VAR = "CLEPSYDRA_CONSOLE_PORT"
SECRET_VAR = "CLEPSYDRA_CONSOLE_SECRET_KEY"
TRACE_URL_VAR = "CLEPSYDRA_CONSOLE_TRACE_URL"
DEFAULT_PORT = 8087
JAEGER_PATTERN = "/trace/{traceId}"
"""Jaeger's trace page, appended to CLEPSYDRA_CONSOLE_TRACE_URL when it names no
``{traceId}`` of its own."""
SECRET_MIN_CHARS = 32
PAGE_MAX = 200
"""The most rows any list of the console shows at once (every list is paged)."""


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    common: CommonSettings
    port: int
    bind: str
    threads: int
    analytics_url: str
    trace_url: str | None
    """A trace viewer's page of one trace, ``{traceId}`` in it (None: no trace links)."""
    secret_key: str = field(repr=False)
    """Signs the session cookie (the login's token and the CSRF token)."""
    cookie_secure: bool
    """The session cookie only over HTTPS (browsers also send it to http://127.0.0.1)."""
    timeout_s: float
    page_size: int
    search_topics_max: int
    """Topics a key or trace-id search looks through before it says it stopped."""
    scan_messages_max: int
    """Newest messages per queue a trace-id search reads (no index holds trace ids)."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> ConsoleSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        secret = env.get(SECRET_VAR, "")
        if not secret:
            if common.auth.enabled:
                raise ConfigError(f"{SECRET_VAR} is required with CLEPSYDRA_AUTH=on: it signs "
                                  f"the login cookie (at least {SECRET_MIN_CHARS} characters; "
                                  "every replica the same)")
            secret = secrets.token_urlsafe(32)  # auth off: only the CSRF tokens depend on it
        elif len(secret) < SECRET_MIN_CHARS:
            raise ConfigError(f"{SECRET_VAR} must be at least {SECRET_MIN_CHARS} characters")
        trace = env.get(TRACE_URL_VAR, "").strip()
        if trace and "{traceId}" not in trace:
            trace = trace.rstrip("/") + JAEGER_PATTERN
        port = env_int(env, PORT_VAR, DEFAULT_PORT, minimum=1)
        return cls(
            common=common,
            port=port,
            bind=env_str(env, "CLEPSYDRA_CONSOLE_BIND", "127.0.0.1"),
            threads=env_int(env, "CLEPSYDRA_CONSOLE_THREADS", 4, minimum=1),
            analytics_url=env_str(env, "CLEPSYDRA_ANALYTICS_URL", "http://127.0.0.1:8085"),
            trace_url=trace or None,
            secret_key=secret,
            cookie_secure=env_bool(env, "CLEPSYDRA_CONSOLE_COOKIE_SECURE", True),
            timeout_s=env_float(env, "CLEPSYDRA_CONSOLE_TIMEOUT_S", 10.0, minimum=0.1),
            page_size=env_int(env, "CLEPSYDRA_CONSOLE_PAGE_SIZE", 50, minimum=1,
                              maximum=PAGE_MAX),
            search_topics_max=env_int(env, "CLEPSYDRA_CONSOLE_SEARCH_TOPICS", 50, minimum=1),
            scan_messages_max=env_int(env, "CLEPSYDRA_CONSOLE_SCAN_MESSAGES", 200, minimum=1,
                                      maximum=1000),
        )

    @property
    def store_url(self) -> str:
        return self.common.store_url.rstrip("/")

    @property
    def retry_url(self) -> str:
        return self.common.retry_url.rstrip("/")

    def trace_link(self, trace_id: str | None) -> str | None:
        if not trace_id or self.trace_url is None:
            return None
        return self.trace_url.replace("{traceId}", trace_id)
