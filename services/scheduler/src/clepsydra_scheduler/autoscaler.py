"""The worker autoscaler's loop (``python -m clepsydra_scheduler autoscale``): every
``interval_s`` read the levels' load from the store, decide (``autoscale.decide``) and set the
worker Deployment's replicas (``kube.DeploymentScale``). A store or API server that does not
answer changes nothing: the replicas stay as they are until the next tick that sees the work.

It serves ``GET /healthz`` on ``CLEPSYDRA_AUTOSCALE_PORT``: 200 while the loop ticks (whatever
the store and the API server answered), 503 when it has stopped ticking.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.levels import DelayLevels
from clepsydra_scheduler.autoscale import ScaleDecision, ScalePolicy, decide, level_loads
from clepsydra_scheduler.autoscale_settings import AutoscaleSettings
from clepsydra_scheduler.ports import HandoverApi, StoreCallFailed

logger = logging.getLogger(__name__)


class ScaleTarget(Protocol):
    """The replicas being set (kube.DeploymentScale, or a twin in tests)."""

    def read_replicas(self) -> int: ...

    def set_replicas(self, replicas: int) -> int: ...


@dataclass
class Autoscaler:
    policy: ScalePolicy
    levels: DelayLevels
    store: HandoverApi
    target: ScaleTarget
    now_s: Callable[[], float] = time.monotonic
    now_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    last_change_s: float | None = None
    """When this autoscaler last changed the replicas (monotonic seconds)."""

    def step(self) -> ScaleDecision | None:
        """One look and, if needed, one change. None when the store did not answer."""
        try:
            loads = level_loads(self.store, self.levels, self.now_ms())
        except StoreCallFailed as exc:
            logger.warning("autoscale hold: store did not answer: %s", exc.message)
            return None
        current = self.target.read_replicas()
        now_s = self.now_s()
        decision = decide(loads, current, self.policy, now_s=now_s,
                          last_change_s=self.last_change_s)
        if decision.changed:
            self.target.set_replicas(decision.desired)
            self.last_change_s = now_s
            logger.info("autoscale workers replicas=%d->%d needed=%d reason=%s due_levels=%s",
                        decision.current, decision.desired, decision.needed, decision.reason,
                        [load.level for load in loads if load.due])
        else:
            logger.debug("autoscale workers replicas=%d needed=%d reason=%s", decision.current,
                         decision.needed, decision.reason)
        return decision


@dataclass
class Heartbeat:
    """When the loop last completed a tick, for /healthz."""

    stale_after_s: float
    now_s: Callable[[], float] = time.monotonic
    last_tick_s: float | None = None

    def tick(self) -> None:
        self.last_tick_s = self.now_s()

    def healthy(self) -> bool:
        return self.last_tick_s is not None and \
            self.now_s() - self.last_tick_s <= self.stale_after_s


def run(autoscaler: Autoscaler, interval_s: float, stop: threading.Event,
        heartbeat: Heartbeat | None = None) -> None:
    """Tick until ``stop`` is set. A failed tick is logged and skipped (the next one retries)."""
    while not stop.is_set():
        try:
            autoscaler.step()
        except ClepsydraError as exc:  # the API server refused or did not answer
            logger.warning("autoscale tick failed; replicas left as they are: %s", exc.message)
        except Exception:
            logger.exception("autoscale tick failed; replicas left as they are")
        if heartbeat is not None:
            heartbeat.tick()
        stop.wait(interval_s)


def serve_health(heartbeat: Heartbeat, bind: str, port: int) -> ThreadingHTTPServer:
    """GET /healthz on a daemon thread; the caller shuts the server down."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/healthz":
                self._send(404, {"error": "not_found"})
                return
            ok = heartbeat.healthy()
            self._send(200 if ok else 503, {"status": "ok" if ok else "stalled"})

        def _send(self, status: int, body: dict[str, str]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((bind, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="autoscale-health", daemon=True).start()
    return server


def run_service(settings: AutoscaleSettings, stop: threading.Event | None = None) -> int:
    """The process: the Kubernetes client (ServiceAccount in a pod, else kubeconfig), the store
    client, /healthz, and the loop until SIGTERM / SIGINT (or ``stop``)."""
    from clepsydra_scheduler.handover_client import HttpHandoverApi
    from clepsydra_scheduler.kube import DeploymentScale, KubeCallFailed, api_client

    stop = stop or _stop_on_signals()
    try:
        api = api_client()
    except KubeCallFailed as exc:
        logger.error("autoscale cannot start: %s", exc.message)
        return 1
    store = HttpHandoverApi(settings.common.store_url, timeout_s=settings.store_timeout_s)
    target = DeploymentScale(api, settings.namespace, settings.deployment)
    heartbeat = Heartbeat(stale_after_s=3 * settings.interval_s + 30.0)
    server = serve_health(heartbeat, settings.bind, settings.port) if settings.port else None
    logger.info("autoscale started deployment=%s/%s min=%d max=%d interval_s=%s",
                settings.namespace, settings.deployment, settings.policy.min_replicas,
                settings.policy.max_replicas, settings.interval_s)
    try:
        run(Autoscaler(settings.policy, settings.levels, store, target), settings.interval_s,
            stop, heartbeat)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        store.close()
        api.close()  # type: ignore[no-untyped-call]
    logger.info("autoscale stopped")
    return 0


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
