"""The routes every HTTP service serves beside its API (DESIGN "HTTP contract"): ``/healthz``,
``/metrics`` (Prometheus text) and ``/openapi.json`` (the document shipped in the service's
package, read once)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

import orjson
from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from clepsydra_web.errors import JSON_TYPE

Health = Callable[[], tuple[dict[str, Any], int]]
"""() -> (the health answer, its status: 200 healthy, 503 not)."""


def ops_blueprint(package: str, *, health: Health,
                  registry: Callable[[], CollectorRegistry]) -> Blueprint:
    """The ops routes of the service whose package ``package`` ships ``openapi.json``."""
    bp = Blueprint("ops", __name__)
    document: list[bytes] = []

    @bp.get("/healthz")
    def healthz() -> Response:
        body, status = health()
        return Response(orjson.dumps(body), status=status, mimetype=JSON_TYPE)

    @bp.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry()), mimetype=None,
                        content_type=CONTENT_TYPE_LATEST)

    @bp.get("/openapi.json")
    def openapi() -> Response:
        if not document:
            document.append(resources.files(package).joinpath("openapi.json").read_bytes())
        return Response(document[0], mimetype=JSON_TYPE)

    return bp
