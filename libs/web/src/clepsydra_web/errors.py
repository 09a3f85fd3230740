"""Error answers, once for every HTTP service: the codes of errors that come from HTTP itself
(an unknown route, a wrong method, a body, request line or headers over a limit) and the Flask
handlers that turn every error into ``{"error": CODE, "message": text}``. The same bad request
gets the same status and code from every service."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from flask import Flask, Response
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from clepsydra_core.errors import BodyTooLarge, ClepsydraError, ValidationError

logger = logging.getLogger(__name__)

JSON_TYPE = "application/json"

HTTP_CODES: Mapping[int, str] = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: BodyTooLarge.code,  # one code for every body over a limit (DEC-too-large-413)
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    417: "EXPECTATION_FAILED",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE",
    500: "SYSTEM_ERROR",
    501: "NOT_IMPLEMENTED",
}


def http_code(status: int) -> str:
    """The v1 error code of an HTTP-level error with this status."""
    return HTTP_CODES.get(status, f"HTTP_{status}")


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    """``{"error": CODE, "message": text}``, the v1 error shape (DESIGN "HTTP contract")."""
    return orjson.dumps({"error": code or http_code(status), "message": message})


def request_too_large(limit_bytes: int, setting: str) -> BodyTooLarge:
    """The 413 for a request body over ``limit_bytes`` (the ``setting`` that sets it): the
    same status and code as a message body over the largest message size
    (DEC-too-large-413)."""
    return BodyTooLarge(f"request body is larger than {limit_bytes} bytes ({setting})",
                        rule="P1")


def error_response(status: int, body: bytes) -> Response:
    return Response(body, status=status, mimetype=JSON_TYPE)


def register_error_handlers(app: Flask, *, size_setting: str) -> None:
    """Every error of ``app`` as a v1 error answer: ``ClepsydraError`` with its code and
    status, Werkzeug's HTTP errors by :data:`HTTP_CODES` (a body over ``MAX_CONTENT_LENGTH``
    names ``size_setting``), anything else a logged 500 ``SYSTEM_ERROR``."""

    @app.errorhandler(ClepsydraError)
    def _clepsydra(exc: ClepsydraError) -> Response:
        return error_response(*error_answer(exc))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        if isinstance(exc, RequestEntityTooLarge):
            err = request_too_large(int(app.config.get("MAX_CONTENT_LENGTH") or 0), size_setting)
            return error_response(status, orjson.dumps(err.to_json()))
        resp = error_response(status, error_body(status, exc.description or exc.name or ""))
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                resp.headers[name] = value  # Allow: on a 405
        return resp

    @app.errorhandler(ParseException)
    def _malformed(exc: ParseException) -> Response:
        return error_response(*error_answer(exc))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        return error_response(*error_answer(exc))


def error_answer(exc: BaseException) -> tuple[int, bytes]:
    """(status, v1 error body) of an exception a request raised, without Flask: what the
    handlers above answer and what the store's lean paths (below Flask) answer too.
    ``ClepsydraError`` with its code and status (logged when a 5xx); a broken request body
    gunicorn met while the route read it (a chunk size that is not hex, a missing terminator)
    a 400, the client's fault; anything else a 500 ``SYSTEM_ERROR``, logged with
    its traceback."""
    if isinstance(exc, ClepsydraError):
        if exc.http_status >= 500:
            logger.error("request failed code=%s: %s", exc.code, exc.message)
        return exc.http_status, orjson.dumps(exc.to_json())
    if isinstance(exc, ParseException):
        err = ValidationError(f"malformed HTTP request body: {exc}", code="INVALID_REQUEST")
        return 400, orjson.dumps(err.to_json())
    logger.error("unexpected error", exc_info=exc)
    return 500, error_body(500, "internal error; see the service's log")
