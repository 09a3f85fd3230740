"""ClientSettings: where the services are, read once from the environment (the names of the
README's configuration table).

Only the CLI and :func:`ClientSettings.from_env` read ``os.environ``; the SDK classes take URLs
as arguments."""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import trace

from clepsydra_client.consumer.rebalance import DEFAULT_BROKER_NAME
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.shard_map import REFRESH_S
from clepsydra_core.settings import Env, env_float, env_int, env_str

SERVICE_NAME = telemetry.CLIENT_SERVICE
ROUTE_REFRESH_VAR = "CLEPSYDRA_CLIENT_ROUTE_REFRESH_S"
"""How often the SDK reads the store cluster's membership and each topic's route again
(``clepsydra_client.routing.Router``; DEC-route-refresh): the longest a running producer or
consumer goes without using a store shard added to the cluster."""


def route_refresh_s(env: Env | None = None) -> float:
    """``CLEPSYDRA_CLIENT_ROUTE_REFRESH_S`` (default 30 s, as RocketMQ's clients poll their name
    server; at least 0.1)."""
    return env_float(os.environ if env is None else env, ROUTE_REFRESH_VAR, REFRESH_S,
                     minimum=0.1)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    store_url: str
    retry_url: str
    otel_exporter: str
    analytics_url: str
    timeout_s: float
    broker_name: str
    """The broker name in the RocketMQ form of a queue (consistent-hash allocation)."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> ClientSettings:
        env = os.environ if env is None else env
        store_port = env_int(env, "CLEPSYDRA_STORE_PORT", 8081, minimum=1)
        retry_port = env_int(env, "CLEPSYDRA_RETRY_PORT", 8082, minimum=1)
        return cls(
            store_url=env_str(env, "CLEPSYDRA_STORE_URL", f"http://127.0.0.1:{store_port}"),
            retry_url=env_str(env, "CLEPSYDRA_RETRY_URL", f"http://127.0.0.1:{retry_port}"),
            otel_exporter=env_str(env, "CLEPSYDRA_OTEL_EXPORTER", "none"),
            analytics_url=env_str(env, "CLEPSYDRA_ANALYTICS_URL", "http://127.0.0.1:"
                                  f"{env_int(env, 'CLEPSYDRA_ANALYTICS_PORT', 8085, minimum=1)}"),
            timeout_s=env_float(env, "CLEPSYDRA_CLIENT_TIMEOUT_S", 10.0, minimum=0.1),
            broker_name=env_str(env, "CLEPSYDRA_CLIENT_BROKER_NAME", DEFAULT_BROKER_NAME),
        )


def ensure_tracing(exporter: str | None = None) -> None:
    """Install a tracer provider when the application has not set one, so that spans have
    trace ids and ``traceparent`` travels in message properties (SPEC O1). An application's
    own provider is left alone."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        if exporter is None:
            exporter = env_str(os.environ, "CLEPSYDRA_OTEL_EXPORTER", "none")
        telemetry.init_tracing(SERVICE_NAME, exporter)
