"""The codes of errors that come from HTTP itself rather than from a rule of ours: an unknown
route, a wrong method, a request line or headers over the server's limits. One table, so every
service (and the HTTP server in front of it) answers the same status with the same code."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

HTTP_CODES: Mapping[int, str] = {
    400: "BAD_REQUEST",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "REQUEST_TOO_LARGE",
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
