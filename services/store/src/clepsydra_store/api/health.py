"""Health, Prometheus metrics and the OpenAPI document (DESIGN: every service serves them)."""

from __future__ import annotations

from importlib import resources

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from clepsydra_store.api.context import ctx
from clepsydra_store.api.web import json_response
from clepsydra_web.jsonio import JSON_TYPE

bp = Blueprint("health", __name__)

_openapi: bytes | None = None


def openapi_document() -> bytes:
    """The OpenAPI 3.1 document shipped beside the package (read once)."""
    global _openapi
    if _openapi is None:
        _openapi = resources.files("clepsydra_store").joinpath("openapi.json").read_bytes()
    return _openapi


@bp.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok", "writable": ctx().settings.engine.writable})


@bp.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(ctx().obs.registry), mimetype=None,
                    content_type=CONTENT_TYPE_LATEST)


@bp.get("/openapi.json")
def openapi() -> Response:
    return Response(openapi_document(), mimetype=JSON_TYPE)
