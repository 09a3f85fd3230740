"""clepsydra_web.errors.error_answer: the one mapping of a request's exception to a v1 error
answer, for Flask's handlers and the store's lean paths below Flask (DESIGN "HTTP contract",
and a broken body)."""

from __future__ import annotations

import logging

import orjson
import pytest
from gunicorn.http.errors import InvalidChunkSize

from clepsydra_core.errors import ClepsydraError, ValidationError
from clepsydra_web.errors import error_answer


def test_a_clepsydra_error_keeps_its_status_and_code() -> None:
    status, body = error_answer(ValidationError("no", code="INVALID_REQUEST"))
    answer = orjson.loads(body)
    assert status == 400 and answer["error"] == "INVALID_REQUEST" and answer["message"] == "no"


def test_a_broken_request_body_is_the_clients_400() -> None:
    status, body = error_answer(InvalidChunkSize("zz"))
    assert status == 400
    answer = orjson.loads(body)
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["message"].startswith("malformed HTTP request body")


def test_anything_else_is_a_logged_500_that_says_nothing_of_it(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="clepsydra_web.errors"):
        status, body = error_answer(KeyError("secret detail"))
    assert status == 500
    answer = orjson.loads(body)
    assert answer["error"] == "SYSTEM_ERROR" and "secret" not in answer["message"]
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)


def test_a_5xx_clepsydra_error_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    err = ClepsydraError("disk gone")
    with caplog.at_level(logging.ERROR, logger="clepsydra_web.errors"):
        status, _body = error_answer(err)
    assert status == err.http_status >= 500
    assert any("disk gone" in r.getMessage() for r in caplog.records)


def test_a_body_over_either_limit_is_one_413_and_one_code() -> None:
    # SPEC P1, DEC-too-large-413: the request limit's answer, the message limit's, Werkzeug's
    # 413 and the OpenAPI documents' 413 all say BODY_TOO_LARGE
    from clepsydra_core.errors import BodyTooLarge
    from clepsydra_core.validation import validate_body
    from clepsydra_web.errors import http_code, request_too_large
    from clepsydra_web.openapi import ERROR_TEXT

    over_request = request_too_large(2048, "CLEPSYDRA_STORE_MAX_REQUEST_BYTES")
    with pytest.raises(BodyTooLarge) as info:
        validate_body(b"12345", max_body_bytes=4)
    answers = [error_answer(over_request), error_answer(info.value)]
    assert [(status, orjson.loads(body)["error"]) for status, body in answers] == [
        (413, "BODY_TOO_LARGE"), (413, "BODY_TOO_LARGE")]
    assert all("SPEC P1" in orjson.loads(body)["message"] for _, body in answers)
    assert "CLEPSYDRA_STORE_MAX_REQUEST_BYTES" in over_request.message
    assert http_code(413) == BodyTooLarge.code and isinstance(over_request, ValidationError)
    assert ERROR_TEXT[413].startswith("BODY_TOO_LARGE")
