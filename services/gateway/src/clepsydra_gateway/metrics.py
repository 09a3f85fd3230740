"""The gateway's Prometheus families and its health routes (``/healthz``, ``/livez``,
``/metrics`` on ``CLEPSYDRA_GATEWAY_HEALTH_PORT``, served by clepsydra_core.runtime.health_http)."""

from __future__ import annotations

import json
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from clepsydra_core.runtime.health_http import JSON, Response

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


class GatewayMetrics:
    def __init__(self, pending: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpcs = Counter("clepsydra_gateway_rpcs", "RPCs answered, by RPC and status code",
                            ["rpc", "code"], registry=self.registry)
        self.seconds = Histogram("clepsydra_gateway_rpc_seconds", "time to answer an RPC",
                                 ["rpc"], registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1,
                                          2.5, 5, 10, 30))
        self.messages = Counter("clepsydra_gateway_messages",
                                "messages sent, handed out and acked", ["direction"],
                                registry=self.registry)
        self.expired = Counter("clepsydra_gateway_expired",
                               "deliveries whose invisible time ran out, by what became of "
                               "them (retry, dlq, dropped, visible, renewed)", ["outcome"],
                               registry=self.registry)
        gauge = Gauge("clepsydra_gateway_deliveries_pending",
                      "messages handed out and not yet acked or sent back",
                      registry=self.registry)
        gauge.set_function(pending)

    def prometheus(self) -> Response:
        return 200, PROMETHEUS, generate_latest(self.registry)


def health_response(problems: list[str]) -> Response:
    body = {"status": "ok" if not problems else "unhealthy", "problems": problems}
    return (200 if not problems else 503), JSON, json.dumps(body).encode()
