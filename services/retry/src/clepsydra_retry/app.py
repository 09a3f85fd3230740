"""create_app(settings) -> Flask: the retry service (send-back, retry ladder, DLQ toolkit)."""

from __future__ import annotations

import logging

import redis
from flask import Flask

from clepsydra_core.runtime import telemetry
from clepsydra_retry import api
from clepsydra_retry.access import RETRY_ACCESS
from clepsydra_retry.dlq import DlqToolkit
from clepsydra_retry.dlq_state import DlqState, RedisDlqState
from clepsydra_retry.groups import GroupStore, StoreGroupStore
from clepsydra_retry.metrics import build_registry
from clepsydra_retry.sendback import SendBackService
from clepsydra_retry.settings import MAX_REQUEST_BYTES_VAR, RetrySettings
from clepsydra_retry.store_client import StoreClient, StoreShards
from clepsydra_web import auth
from clepsydra_web.errors import register_error_handlers
from clepsydra_web.ops import ops_blueprint
from clepsydra_web.tracing import ServerTracing

logger = logging.getLogger(__name__)


def create_app(settings: RetrySettings, *, groups: GroupStore | None = None,
               dlq_state: DlqState | None = None) -> Flask:
    """The Flask app. ``groups``/``dlq_state`` replace the Redis backends (in-memory twins)."""
    telemetry.init_tracing(telemetry.RETRY_SERVICE, settings.common.otel_exporter)
    app = Flask("clepsydra_retry")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True,
                                  socket_timeout=10, socket_connect_timeout=5,
                                  health_check_interval=30)
    state = dlq_state or RedisDlqState(client)
    store = StoreClient(settings.store_url, timeout_s=settings.store_timeout_s,
                        writable_ttl_ms=settings.writable_ttl_ms,
                        pool_size=max(settings.threads, 4))
    shards = StoreShards(store)  # every store shard's client (DEC-store-shards)
    if groups is None:
        durable = StoreGroupStore(store, client)
        durable.adopt_redis_groups()
        groups = durable
    dlq = DlqToolkit(shards, groups, state, settings.delay_levels,
                     batch=settings.resend_batch, audit_max=settings.audit_max)
    registry, latency = build_registry(groups, dlq)
    app.extensions["clepsydra_retry"] = api.Services(
        settings=settings, redis=client, groups=groups, store=store,
        send_back=SendBackService(groups, shards, settings.delay_levels,
                                  auto_create_groups=settings.common.auto_create_groups,
                                  history_max=settings.history_max),
        dlq=dlq, registry=registry, latency=latency)
    app.url_map.converters["dlq_item"] = api.DlqItemConverter
    for blueprint in api.BLUEPRINTS:
        app.register_blueprint(blueprint)
    app.register_blueprint(ops_blueprint("clepsydra_retry", health=api.health,
                                         registry=lambda: registry))
    app.before_request(api.start_timer)
    app.after_request(api.observe)
    # A span per request, a child of the caller's traceparent (SPEC O1); the send-back
    # routes also make one retry.send_back span per message (sendback.py).
    ServerTracing("retry").install(app)
    auth.install(app, settings.common.auth, RETRY_ACCESS, service="retry service")

    register_error_handlers(app, size_setting=MAX_REQUEST_BYTES_VAR)
    return app
