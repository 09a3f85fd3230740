"""create_app(settings) -> Flask: the console's pages, its static files (served by itself: no
CDN, no build step), ``/healthz`` and ``/metrics``, a span per page (``console.<page>``), and
the sign-in and CSRF hooks (login.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import orjson
from flask import Blueprint, Flask, Response, g, render_template, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from werkzeug.exceptions import HTTPException

from clepsydra_console import actions, pages, rates
from clepsydra_console.backend import Clients, each_shard
from clepsydra_console.context import EXTENSION, Console
from clepsydra_console.login import ANONYMOUS, OPEN_ENDPOINTS, SignIn, csrf_ok, to_login
from clepsydra_console.settings import ConsoleSettings
from clepsydra_console.shards import ShardRead, unread
from clepsydra_core.runtime import telemetry
from clepsydra_web.auth import warn_if_off
from clepsydra_web.tracing import ServerTracing

logger = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
"""Every answer: no script, style or frame from elsewhere (the pages load only their own)."""
SESSION_HOURS = 12


def _counters(base_url: str, which: str, timeout_s: float) -> rates.Sampler:
    names = (rates.PRODUCED, rates.DELIVERED) if which == "store" \
        else (rates.SEND_BACKS, rates.DLQ_DEPTH)
    return rates.Sampler(lambda: rates.parse_metrics(
        rates.fetch_text(base_url, "/metrics", timeout_s), names))


def _ops(app: Flask, health: Callable[[], tuple[dict[str, Any], int]],
         registry: CollectorRegistry) -> None:
    """``/healthz`` and ``/metrics`` (the console has no JSON API, so no ``/openapi.json``)."""
    bp = Blueprint("ops", __name__)

    @bp.get("/healthz")
    def healthz() -> Response:
        body, status = health()
        return Response(orjson.dumps(body), status=status, mimetype="application/json")

    @bp.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    app.register_blueprint(bp)


def create_app(settings: ConsoleSettings, *, clients: Clients | None = None) -> Flask:
    telemetry.init_tracing(telemetry.CONSOLE_SERVICE, settings.common.otel_exporter)
    app = Flask("clepsydra_console")
    app.config.update(
        SECRET_KEY=settings.secret_key, SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SECURE=settings.cookie_secure, SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_NAME="clepsydra_console", MAX_CONTENT_LENGTH=1 << 20,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS))
    clients = clients or Clients(settings.store_url, settings.retry_url,
                                 settings.analytics_url, settings.timeout_s)
    console = Console(settings, clients, SignIn(settings.common.auth),
                      _counters(clients.metrics_store.base_url, "store", settings.timeout_s),
                      _counters(clients.metrics_retry.base_url, "retry", settings.timeout_s),
                      rates.ShardSamplers(partial(_counters, which="store",
                                                  timeout_s=settings.timeout_s)))
    app.extensions[EXTENSION] = console
    registry = CollectorRegistry(auto_describe=True)
    views = Counter("clepsydra_console_pages", "Pages served by endpoint and status",
                    ["endpoint", "status"], registry=registry)
    app.register_blueprint(pages.bp)
    app.register_blueprint(actions.bp)
    _ops(app, partial(_health, console), registry)
    ServerTracing("console").install(app)
    warn_if_off(settings.common.auth, "console")

    @app.before_request
    def _sign_in() -> Any:
        if request.endpoint in OPEN_ENDPOINTS:
            return None
        found = console.sign_in.user()
        if found is None:
            return to_login()
        g.user = found
        if request.method == "POST" and request.endpoint != "pages.login" and not csrf_ok():
            return _error_page(400, "CSRF_FAILED: the form did not carry this session's "
                                    "token (it expired, or another site sent it): open the "
                                    "page again and repeat")
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            resp.headers.setdefault(name, value)
        if request.endpoint != "static":
            resp.headers.setdefault("Cache-Control", "no-store")
        views.labels(request.endpoint or "unmatched", str(resp.status_code)).inc()
        return resp

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Any:
        return _error_page(exc.code or 500, exc.description or exc.name or "")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Any:
        logger.exception("page failed path=%s", request.path)
        return _error_page(500, f"the page failed: {type(exc).__name__}")

    logger.info("console ready store=%s retry=%s auth=%s", settings.store_url,
                settings.retry_url, "on" if settings.common.auth.enabled else "off")
    return app


def _error_page(status: int, text: str) -> tuple[str, int]:
    who = g.get("user") or ANONYMOUS
    return render_template("error.html", status=status, text=text, user=who,
                           csrf="", auth_on=False, trace_link=lambda _t: None), status


def _health(console: Console) -> tuple[dict[str, Any], int]:
    """``/healthz``: 200 while the console runs; says whether the store (every shard of it:
    ``store`` is true when all answer, ``storeShards`` names each with more than one,
    DEC-console-shards) and the retry service answer (the console shows their failures on its
    pages, it does not stop)."""
    out: dict[str, Any] = {"status": "ok"}
    try:
        reads = each_shard(console.clients.admin(None),
                           lambda _shard, http: http.get("/healthz", timeout_s=2.0))
    except Exception:  # the shards could not even be listed: shard 0 is down
        reads = [ShardRead(0, error="no answer")]
    out["store"] = not unread(reads)
    if len(reads) > 1:
        out["storeShards"] = {str(r.shard): r.error is None for r in reads}
    try:
        console.clients.metrics_retry.get("/healthz", timeout_s=2.0)
        out["retry"] = True
    except Exception:
        out["retry"] = False
    return out, 200
