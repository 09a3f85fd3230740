"""create_app(settings, store=None) -> Flask: the store's HTTP API over one MessageStore.

The app opens the MessageStore itself unless one is given (tests, the benchmark); whoever
opened it closes it: ``app.extensions["clepsydra"].close()`` (``__main__`` does it when the
gunicorn worker exits). Every route of the table (``api/contract.py``) is a Flask view that
answers through the envelope (``api/envelope.py``: access, span ``store.<operation>``,
metrics, errors); the lean and poller lanes' routes are answered below Flask by the lean WSGI
path (``api/fastpath.py``) unless ``CLEPSYDRA_STORE_FAST_PATH=false``. Flask's own hooks trace,
count and check only what is not in the table (an unknown route, a wrong method; the ops
routes are open and untraced). With ``CLEPSYDRA_AUTH=on`` every route but the ops ones needs a
bearer token whose role covers it (clepsydra_web.auth).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

from flask import Flask, Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from clepsydra_core.runtime.telemetry import STORE_SERVICE, init_tracing
from clepsydra_core.wire.cluster import SHARDS_HEADER
from clepsydra_core.wire.health import OK, StoreHealth
from clepsydra_store.api import envelope
from clepsydra_store.api.context import EXTENSION, StoreContext
from clepsydra_store.api.contract import ROUTES, STORE_ACCESS
from clepsydra_store.api.envelope import Call, StoreRoute, status_line
from clepsydra_store.api.fastpath import LeanPath
from clepsydra_store.api.observability import Observability
from clepsydra_store.cluster import Cluster
from clepsydra_store.consumers import ConsumerRegistry
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.queue_locks import QueueLocks
from clepsydra_store.settings import MAX_REQUEST_BYTES_VAR, StoreSettings
from clepsydra_web import auth
from clepsydra_web.errors import register_error_handlers
from clepsydra_web.jsonio import JSON_TYPE
from clepsydra_web.ops import ops_blueprint

logger = logging.getLogger(__name__)

_PARAM = re.compile(r"\{(\w+)\}")


def create_app(settings: StoreSettings, store: MessageStore | None = None) -> Flask:
    init_tracing(STORE_SERVICE, settings.common.otel_exporter)
    owns_store = store is None
    if store is None:
        store = MessageStore(settings.engine)
    consumers = ConsumerRegistry(settings.consumer_expiry_ms)
    endpoints = frozenset(route.endpoint for route in ROUTES)
    context = StoreContext(settings=settings, store=store, consumers=consumers,
                           obs=Observability(store, settings.common.delay_levels, consumers,
                                             enveloped=endpoints),
                           locks=QueueLocks(settings.lock_expiry_ms), owns_store=owns_store,
                           cluster=Cluster(settings.cluster, store,
                                           writable=settings.engine.writable,
                                           store_host=settings.engine.store_host,
                                           token=settings.peer_token))
    shard = context.cluster
    assert shard is not None
    if shard.clustered:  # every answer names the cluster's size (DEC-store-shards)
        context.shards_header = (SHARDS_HEADER, str(shard.shape.shards))
    app = Flask("clepsydra_store", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION] = context
    for route in ROUTES:
        app.add_url_rule(_PARAM.sub(lambda m: f"<{_snake(m.group(1))}>", route.path),
                         endpoint=route.endpoint, view_func=_view(context, route),
                         methods=[route.method])
    app.register_blueprint(ops_blueprint(
        "clepsydra_store", registry=lambda: context.obs.registry,
        health=lambda: (StoreHealth(OK, shard.accepting).to_json(), 200)))
    register_error_handlers(app, size_setting=MAX_REQUEST_BYTES_VAR)
    context.obs.tracing.install(app, on_end=context.obs.count)
    context.guard = auth.install(app, settings.common.auth, STORE_ACCESS, service="store",
                                 checked_in_view=endpoints)
    if context.shards_header is not None:  # the answers Flask makes itself (ops, 404, 405)
        app.after_request(_with_shards(context.shards_header))
    if settings.fast_path:
        app.wsgi_app = LeanPath(app.wsgi_app, context, ROUTES)  # type: ignore[method-assign]
    shard.start()
    logger.info("store app ready data_dir=%s writable=%s fast_path=%s shard=%d shards=%d",
                settings.engine.data_dir, settings.engine.writable, settings.fast_path,
                shard.shard_id, shard.shape.shards)
    return app


def _view(context: StoreContext, route: StoreRoute) -> Callable[..., Response]:
    """The Flask view of a route: its envelope's answer."""

    names = {_snake(name): name for name in _PARAM.findall(route.path)}

    def view(**args: str) -> Response:
        call = Call(request.environ, {names[k]: v for k, v in args.items()}, _args, _body,
                    context.settings.max_request_bytes)
        status, headers, body = envelope.answer(context, route, call)
        response = Response(body, status=status_line(status), mimetype=JSON_TYPE)
        for name, value in headers[2:]:  # (after Content-Type, Content-Length: a refusal's)
            response.headers[name] = value
        return response

    view.__name__ = route.endpoint.rpartition(".")[2]
    return view


def _with_shards(header: tuple[str, str]) -> Callable[[Response], Response]:
    """An ``after_request`` hook: the cluster's size on an answer the envelope did not make."""
    name, value = header

    def add(response: Response) -> Response:
        response.headers.setdefault(name, value)
        return response
    return add


def _snake(name: str) -> str:
    """A path parameter's name as a Flask view argument: ``queueId`` -> ``queue_id``."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _args() -> Mapping[str, str]:
    return request.args


def _body() -> bytes | None:
    """The request's body, None when it is over ``MAX_CONTENT_LENGTH``."""
    try:
        return request.get_data(cache=False)
    except RequestEntityTooLarge:
        return None
