"""The scheduler's health endpoints: a small stdlib HTTP server on a daemon thread
(clepsydra_core.runtime.health_http; the scheduler stays Flask-free), for ``make run``'s readiness
check, the images' HEALTHCHECK and the Kubernetes probes.

Worker, on ``CLEPSYDRA_SCHEDULER_PORT`` (default 8083; 0: none):

- ``GET /healthz``: 200 when this worker consumes its queues (its Celery consumer started), Redis
  answers PING, the store answers (its schedule levels), and every delay level's task is
  alive: a run holds the level's lease and the lease is fresh (its time to live in Redis has
  not run out; runs renew it every ``lease_s / 3``). Else 503. The JSON body says what was
  checked and what failed::

      {"status": "ok" | "unhealthy", "role": "worker", "problems": ["level 3: no run holds
       its lease"], "redis": {"ok": true}, "store": {"ok": true, "url": "..."},
       "levels": [{"level": 1, "leased": true, "leaseTtlMs": 2480, "statsAgeMs": 130}]}

- ``GET /livez``: 200 while the process serves: for a liveness probe, which must not restart a
  worker only because the store or Redis is away.
- ``GET /metrics``: the Prometheus families of ``status --prometheus`` (from Redis).

Beat, on ``CLEPSYDRA_SCHEDULER_BEAT_PORT`` (default 8084; 0: none): ``GET /healthz`` (200 when
its broker, Redis, answers PING) and ``GET /livez``. A worker with beat embedded
(``worker --beat``, the local stack) serves both endpoints from its one process; beat's
``/healthz`` then also needs beat's thread running (``"embedded": true`` in the body).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest

from clepsydra_core.levels import DelayLevels
from clepsydra_core.runtime.health_http import JSON, HealthServer, Response
from clepsydra_scheduler.ports import HandoverApi, LevelStateUnavailable, StoreCallFailed
from clepsydra_scheduler.settings import SchedulerSettings
from clepsydra_scheduler.stats import LevelStats

if TYPE_CHECKING:
    from clepsydra_core.runtime.celery_beat import EmbeddedBeat

logger = logging.getLogger(__name__)

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
HEALTH_TIMEOUT_S = 2.0
"""A probe's store call gives up after this (Kubernetes probes time out after a few seconds)."""

class HealthSource(Protocol):
    """What the checks read from Redis (RedisLevelState, or its in-memory twin)."""

    def ping(self) -> None: ...

    def lease_ttl_ms(self, level: int) -> int | None: ...

    def read_stats(self, level: int) -> LevelStats: ...


@dataclass(frozen=True, slots=True)
class LevelHealth:
    level: int
    lease_ttl_ms: int | None
    """Time left on the lease; None when no run holds it."""
    stats_age_ms: int | None
    """How long ago a run last recorded the level's figures; None if never."""

    @property
    def alive(self) -> bool:
        return self.lease_ttl_ms is not None and self.lease_ttl_ms > 0

    def as_json(self) -> dict[str, Any]:
        return {"level": self.level, "leased": self.alive, "leaseTtlMs": self.lease_ttl_ms,
                "statsAgeMs": self.stats_age_ms}


@dataclass(frozen=True, slots=True)
class HealthReport:
    role: str
    redis_error: str | None = None
    store_url: str | None = None
    store_error: str | None = None
    levels: tuple[LevelHealth, ...] = ()
    problems: tuple[str, ...] = field(default=())
    embedded: bool = False
    """Beat runs on a thread of the worker (``worker --beat``)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": "ok" if self.ok else "unhealthy",
            "role": self.role,
            "problems": list(self.problems),
            "redis": {"ok": self.redis_error is None, "error": self.redis_error},
        }
        if self.role == "worker":
            body["store"] = {"ok": self.store_error is None, "url": self.store_url,
                             "error": self.store_error}
            body["levels"] = [lv.as_json() for lv in self.levels]
        elif self.embedded:
            body["embedded"] = True
        return body


def check_worker(levels: DelayLevels, state: HealthSource, store: HandoverApi,
                 store_url: str, now_ms: int, consuming: bool = True) -> HealthReport:
    """This worker consuming its queues, Redis, the store, and every level's lease."""
    problems: list[str] = [] if consuming else ["worker: not consuming its queues yet"]
    redis_error: str | None = None
    level_health: list[LevelHealth] = []
    try:
        state.ping()
        for level in levels.levels():
            stats = state.read_stats(level)
            health = LevelHealth(
                level=level, lease_ttl_ms=state.lease_ttl_ms(level),
                stats_age_ms=max(now_ms - stats.updated_ms, 0) if stats.updated_ms else None)
            level_health.append(health)
            if not health.alive:
                problems.append(f"level {level}: no run holds its lease")
    except LevelStateUnavailable as exc:
        redis_error = exc.message
        problems.insert(0, f"redis: {exc.message}")
    store_error: str | None = None
    try:
        store.levels()
    except StoreCallFailed as exc:
        store_error = exc.message
        problems.insert(0, f"store: {exc.message}")
    return HealthReport(role="worker", redis_error=redis_error, store_url=store_url,
                        store_error=store_error, levels=tuple(level_health),
                        problems=tuple(problems))


def check_beat(state: HealthSource, beat_thread_alive: bool | None = None) -> HealthReport:
    """Beat needs only its broker; embedded in a worker (``beat_thread_alive`` not None), its
    thread running too."""
    problems: list[str] = []
    redis_error: str | None = None
    try:
        state.ping()
    except LevelStateUnavailable as exc:
        redis_error = exc.message
        problems.append(f"redis: {exc.message}")
    if beat_thread_alive is False:
        problems.append("beat: its thread in this worker is not running")
    return HealthReport(role="beat", redis_error=redis_error, problems=tuple(problems),
                        embedded=beat_thread_alive is not None)


def report_response(report: HealthReport) -> Response:
    body = json.dumps(report.as_json(), separators=(",", ":")).encode()
    return (200 if report.ok else 503), JSON, body


def live_response() -> Response:
    return 200, JSON, b'{"status":"ok"}'


def serve_health(settings: SchedulerSettings, role: str, port: int, *,
                 beat: EmbeddedBeat | None = None,
                 ready: threading.Event | None = None) -> HealthServer:
    """The worker's or beat's endpoint, started (OSError when the port cannot be bound);
    ``beat``: beat embedded in this worker, whose thread beat's /healthz checks; ``ready``:
    set while the worker consumes its queues (None: not checked)."""
    from clepsydra_scheduler.delivery import SystemClock
    from clepsydra_scheduler.handover_client import HttpHandoverApi
    from clepsydra_scheduler.level_state import RedisLevelState
    from clepsydra_scheduler.metrics import SchedulerCollector, gather

    state = RedisLevelState.from_url(settings.common.effective_redis_url)
    clock = SystemClock()
    store_url = settings.common.store_url

    def healthz_worker() -> Response:
        store = HttpHandoverApi(store_url, timeout_s=HEALTH_TIMEOUT_S,
                                connect_timeout_s=HEALTH_TIMEOUT_S)
        try:
            return report_response(check_worker(settings.levels, state, store, store_url,
                                                clock.now_ms(),
                                                ready is None or ready.is_set()))
        finally:
            store.close()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(
        lambda: gather(settings.levels, state, None, clock.now_ms())))

    def metrics() -> Response:
        return 200, PROMETHEUS, generate_latest(registry)

    routes: dict[str, Callable[[], Response]] = {"/livez": live_response}
    if role == "worker":
        routes.update({"/healthz": healthz_worker, "/metrics": metrics})
    else:
        routes["/healthz"] = lambda: report_response(
            check_beat(state, None if beat is None else beat.alive()))
    server = HealthServer(settings.bind, port, routes, name="scheduler-health",
                          server_version="clepsydra-scheduler").start()
    logger.info("scheduler %s health on bind=%s port=%d", role, settings.bind, server.port)
    return server
