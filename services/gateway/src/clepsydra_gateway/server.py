"""create_server(settings) -> Gateway: the gRPC server (its handler threads), the health server
and the sweeper, over one Redis client and one HTTP client per service."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
import redis

from clepsydra_core.naming import GATEWAY_SERVICE
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.health_http import HealthServer, Response
from clepsydra_gateway.access import Access
from clepsydra_gateway.backend import Backend
from clepsydra_gateway.consume import Consumption
from clepsydra_gateway.metrics import GatewayMetrics, health_response
from clepsydra_gateway.protocol import service_pb2_grpc
from clepsydra_gateway.service import MessagingService
from clepsydra_gateway.settings import GatewaySettings
from clepsydra_gateway.state import GatewayState

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD_BYTES = 1 << 20
"""Room above the largest body for a request's other fields (gRPC refuses larger messages
before the gateway sees them)."""


class Gateway:
    """The running gateway; ``start()`` binds and serves, ``stop()`` drains and closes."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        telemetry.init_tracing(GATEWAY_SERVICE, settings.common.otel_exporter)
        self.redis = redis.Redis.from_url(settings.common.effective_redis_url,
                                          socket_timeout=10, socket_connect_timeout=5,
                                          health_check_interval=30, decode_responses=True)
        self.state = GatewayState(self.redis)
        self.backend = Backend(settings.common.store_url, settings.common.retry_url,
                               timeout_s=settings.store_timeout_s,
                               refused_retry_s=settings.store_retry_s)
        self.metrics = GatewayMetrics(self._pending)
        self.consumption = Consumption(settings, self.state, self.backend,
                                       count=lambda outcome: self.metrics.expired.labels(
                                           outcome).inc())
        self.service = MessagingService(settings, self.backend, self.consumption,
                                        Access(settings.common.auth), self.metrics)
        limit = settings.max_body_bytes + MESSAGE_OVERHEAD_BYTES
        self.grpc = grpc.server(
            ThreadPoolExecutor(max_workers=settings.threads, thread_name_prefix="gateway"),
            options=[("grpc.max_receive_message_length", limit),
                     ("grpc.max_send_message_length", -1),
                     ("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, self.grpc)
        self.health: HealthServer | None = None
        self.port = 0

    def _pending(self) -> float:
        try:
            return float(self.state.pending())
        except redis.RedisError:
            return float("nan")

    def healthz(self) -> Response:
        problems = []
        try:
            self.redis.ping()
        except redis.RedisError as exc:
            problems.append(f"redis: {exc}")
        if not self.backend.store_health():
            problems.append(f"store: {self.settings.common.store_url} does not answer /healthz")
        return health_response(problems)

    def start(self) -> Gateway:
        """Bind (OSError naming the port when it is taken) and serve."""
        address = f"{self.settings.bind}:{self.settings.port}"
        try:
            self.port = self.grpc.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {address}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"cannot listen on {address}")
        self.grpc.start()
        self.consumption.start_sweeper()
        if self.settings.health_port:  # last: /healthz answering means the gateway serves
            self.health = HealthServer(self.settings.bind, self.settings.health_port, {
                "/healthz": self.healthz, "/livez": lambda: health_response([]),
                "/metrics": self.metrics.prometheus}, name="gateway-health",
                server_version="clepsydra-gateway").start()
        logger.info("gateway ready port=%d health_port=%d store=%s retry=%s auth=%s",
                    self.port, self.settings.health_port, self.settings.common.store_url,
                    self.settings.common.retry_url,
                    "on" if self.settings.common.auth.enabled else "off")
        if not self.settings.common.auth.enabled:
            logger.warning("gateway: CLEPSYDRA_AUTH is off: anyone who reaches port %d may "
                           "send and consume", self.port)
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        self.grpc.stop(grace_s).wait(grace_s + 1)
        self.consumption.stop()
        if self.health is not None:
            self.health.close()
        self.backend.close()
        self.redis.close()


def create_server(settings: GatewaySettings) -> Gateway:
    return Gateway(settings)
