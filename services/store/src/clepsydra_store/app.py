"""create_app(settings, store=None) -> Flask: the store's HTTP API over one MessageStore.

The app opens the MessageStore itself unless one is given (tests, the benchmark); whoever
opened it closes it: ``app.extensions["clepsydra"].close()`` (``__main__`` does it when the
gunicorn worker exits). Every request that carries messages is a span ``store.<operation>``
(clepsydra_web.tracing; the ops routes, the level table and empty pulls make none); the two
produce routes and the timers' hand-over are answered by a lean WSGI path in front of Flask
(``api/fastpath.py``) unless ``CLEPSYDRA_STORE_FAST_PATH=false``. With ``CLEPSYDRA_AUTH=on``
every route but the ops ones needs a bearer token whose role covers it (api/access.py,
clepsydra_web.auth).
"""

from __future__ import annotations

import logging

from flask import Flask

from clepsydra_core.telemetry import STORE_SERVICE, init_tracing
from clepsydra_core.wire.health import OK, StoreHealth
from clepsydra_store.api import (
    cluster,
    groups,
    handover,
    history,
    internal,
    locks,
    messages,
    queues,
    timers,
    tokens,
    topics,
)
from clepsydra_store.api.access import STORE_ACCESS
from clepsydra_store.api.context import EXTENSION, StoreContext
from clepsydra_store.api.fastpath import ProduceFastPath
from clepsydra_store.api.observability import Observability
from clepsydra_store.cluster import Cluster
from clepsydra_store.consumers import ConsumerRegistry
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.queue_locks import QueueLocks
from clepsydra_store.settings import MAX_REQUEST_BYTES_VAR, StoreSettings
from clepsydra_web import auth
from clepsydra_web.errors import register_error_handlers
from clepsydra_web.ops import ops_blueprint

logger = logging.getLogger(__name__)

BLUEPRINTS = (topics.bp, messages.bp, timers.bp, queues.bp, groups.bp, locks.bp, handover.bp,
              internal.bp, tokens.bp, history.bp, cluster.bp)


def create_app(settings: StoreSettings, store: MessageStore | None = None) -> Flask:
    init_tracing(STORE_SERVICE, settings.common.otel_exporter)
    owns_store = store is None
    if store is None:
        store = MessageStore(settings.engine)
    consumers = ConsumerRegistry(settings.consumer_expiry_ms)
    context = StoreContext(settings=settings, store=store, consumers=consumers,
                           obs=Observability(store, settings.common.delay_levels, consumers,
                                             self_traced=messages.SELF_TRACED),
                           locks=QueueLocks(settings.lock_expiry_ms), owns_store=owns_store,
                           cluster=Cluster(settings.cluster, store,
                                           writable=settings.engine.writable,
                                           store_host=settings.engine.store_host,
                                           token=settings.peer_token))
    shard = context.cluster
    assert shard is not None
    app = Flask("clepsydra_store", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION] = context
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    app.register_blueprint(ops_blueprint(
        "clepsydra_store", registry=lambda: context.obs.registry,
        health=lambda: (StoreHealth(OK, shard.accepting).to_json(), 200)))
    register_error_handlers(app, size_setting=MAX_REQUEST_BYTES_VAR)
    context.obs.tracing.install(app, on_end=context.obs.count)
    guard = auth.install(app, settings.common.auth, STORE_ACCESS, service="store")
    context.guard = guard
    if shard.clustered:  # every answer names the cluster's size (DEC-store-shards)
        app.wsgi_app = cluster.ShardsHeader(  # type: ignore[method-assign]
            app.wsgi_app, shard.shape.shards)
    if settings.fast_path:
        app.wsgi_app = ProduceFastPath(app.wsgi_app, context,  # type: ignore[method-assign]
                                       guard)
    shard.start()
    logger.info("store app ready data_dir=%s writable=%s fast_path=%s shard=%d shards=%d",
                settings.engine.data_dir, settings.engine.writable, settings.fast_path,
                shard.shard_id, shard.shape.shards)
    return app
