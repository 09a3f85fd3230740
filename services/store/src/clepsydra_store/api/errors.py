"""One translation of errors into the v1 body ``{"error": CODE, "message": text}``.

``ClepsydraError`` keeps its code and status; Werkzeug's HTTP errors (unknown route 404, wrong
method 405, request too large 413, unreadable body 400) get a code of their own; anything else
is a 500 ``SYSTEM_ERROR`` logged with its traceback. Bad input never reaches the last case.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flask import Flask, Response
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from clepsydra_core.errors import ClepsydraError
from clepsydra_store.api import produce
from clepsydra_store.api.context import ctx
from clepsydra_web.errors import http_code
from clepsydra_web.jsonio import JSON_TYPE, dumps

logger = logging.getLogger(__name__)


def error_response(body: Mapping[str, object], status: int) -> Response:
    return Response(dumps(body), status=status, mimetype=JSON_TYPE)


def register(app: Flask) -> None:
    @app.errorhandler(ClepsydraError)
    def _clepsydra(exc: ClepsydraError) -> Response:
        if exc.http_status >= 500:
            logger.error("request failed: %s %s", exc.code, exc.message)
        return error_response(exc.to_json(), exc.http_status)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        if isinstance(exc, RequestEntityTooLarge):
            err = produce.too_large(ctx().settings.max_request_bytes)
            return error_response(err.to_json(), status)
        resp = error_response({"error": http_code(status),
                               "message": exc.description or exc.name}, status)
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                resp.headers[name] = value  # Allow: on a 405
        return resp

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        logger.exception("unexpected error")
        return error_response({"error": http_code(500),
                               "message": "internal error; see the store's log"}, 500)
