"""create_app(settings) -> Flask: the retry service (send-back, retry ladder, DLQ toolkit)."""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from clepsydra_core import telemetry
from clepsydra_core.errors import ClepsydraError
from clepsydra_retry import api
from clepsydra_retry.dlq import DlqToolkit
from clepsydra_retry.dlq_state import DlqState, RedisDlqState
from clepsydra_retry.groups import GroupStore, StoreGroupStore
from clepsydra_retry.metrics import build_registry
from clepsydra_retry.sendback import SendBackService
from clepsydra_retry.settings import RetrySettings
from clepsydra_retry.store_client import StoreClient
from clepsydra_web.errors import http_code

logger = logging.getLogger(__name__)


def create_app(settings: RetrySettings, *, groups: GroupStore | None = None,
               dlq_state: DlqState | None = None) -> Flask:
    """The Flask app. ``groups``/``dlq_state`` replace the Redis backends (in-memory twins)."""
    telemetry.init_tracing("retry", settings.common.otel_exporter)
    app = Flask("clepsydra_retry")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True,
                                  socket_timeout=10, socket_connect_timeout=5,
                                  health_check_interval=30)
    state = dlq_state or RedisDlqState(client)
    store = StoreClient(settings.store_url, timeout_s=settings.store_timeout_s,
                        writable_ttl_ms=settings.writable_ttl_ms,
                        pool_size=max(settings.threads, 4))
    if groups is None:
        durable = StoreGroupStore(store, client)
        durable.adopt_redis_groups()
        groups = durable
    dlq = DlqToolkit(store, groups, state, settings.delay_levels,
                     batch=settings.resend_batch, audit_max=settings.audit_max)
    registry, latency = build_registry(groups, dlq)
    app.extensions["clepsydra_retry"] = api.Services(
        settings=settings, redis=client, groups=groups, store=store,
        send_back=SendBackService(groups, store, settings.delay_levels,
                                  history_max=settings.history_max),
        dlq=dlq, registry=registry, latency=latency)
    for blueprint in api.BLUEPRINTS:
        app.register_blueprint(blueprint)
    app.before_request(api.start_timer)
    app.after_request(api.observe)

    @app.errorhandler(ClepsydraError)
    def clepsydra_error(exc: ClepsydraError) -> tuple[Response, int]:
        if exc.http_status >= 500:
            logger.warning("request failed code=%s: %s", exc.code, exc.message)
        return jsonify(exc.to_json()), exc.http_status

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        status = exc.code or 500
        return jsonify({"error": http_code(status),
                        "message": exc.description or exc.name}), status

    return app
