"""Tokens through a running store (issue 16; ``clepsydra auth ... --store``): list, create,
revoke, admin only (api/access.py). They rewrite the store's tokens file
(CLEPSYDRA_AUTH_TOKENS_FILE) atomically; every service reading that file picks the change up
within a second. Where the file is a mounted Kubernetes Secret it cannot be written: the
routes answer 409 ``TOKENS_FILE_READ_ONLY`` and the Secret is where tokens change. With auth off
there are no tokens to manage: 404 ``AUTH_OFF``.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response

from clepsydra_core.auth import parse_role
from clepsydra_core.auth_tokens import (
    TokensFileReadOnly,
    create_token,
    parse_rate,
    read_entries,
    revoke_token,
)
from clepsydra_core.errors import ClepsydraError, NotFound, ValidationError
from clepsydra_store.api.context import ctx
from clepsydra_store.api.web import json_response, request_object
from clepsydra_web import jsonio

bp = Blueprint("auth", __name__)

CREATE_FIELDS = frozenset({"name", "role", "topics", "groups", "ratePerS"})


class AuthOff(ClepsydraError):
    """With access control off there are no tokens: the collection does not exist."""

    code = "AUTH_OFF"
    http_status = 404


class ReadOnlyTokens(ClepsydraError):
    code = "TOKENS_FILE_READ_ONLY"
    http_status = 409


def _path() -> Path:
    auth = ctx().settings.common.auth
    if not auth.enabled or auth.tokens_file is None:
        raise AuthOff("access control is off (CLEPSYDRA_AUTH=off): there are no tokens to "
                      "manage; `clepsydra auth create --file PATH` writes a tokens file")
    return auth.tokens_file


def _patterns(value: object, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError(f"{name} must be a pattern or a list of patterns")
    return tuple(value)


@bp.get("/v1/auth/tokens")
def list_tokens() -> Response:
    return json_response({"tokens": [e.describe() for e in read_entries(_path())]})


@bp.post("/v1/auth/tokens")
def create() -> Response:
    path = _path()
    body = request_object()
    jsonio.check_fields(body, CREATE_FIELDS, "token")
    name = jsonio.req_str(body, "name")
    try:
        role = parse_role(jsonio.req_str(body, "role"))
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    try:
        entry, token = create_token(path, name, role,
                                    topics=_patterns(body.get("topics"), "topics"),
                                    groups=_patterns(body.get("groups"), "groups"),
                                    rate_per_s=parse_rate(body.get("ratePerS")))
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    return json_response({**entry.describe(), "token": token}, 201)


@bp.delete("/v1/auth/tokens/<name>")
def revoke(name: str) -> Response:
    try:
        found = revoke_token(_path(), name)
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    if not found:
        raise NotFound(f"no token named {name!r}")
    return json_response({"name": name, "revoked": True})
