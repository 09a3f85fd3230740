"""Tokens through a running store (``clepsydra auth ...`` without ``--file``): list, create,
revoke, admin only (api/access.py). They rewrite the store's tokens file
(CLEPSYDRA_AUTH_TOKENS_FILE) atomically through the store's own token table, so the store
answers from the new tokens as soon as the route has answered; the other services reading that
file accept a new token at once and refuse a revoked one within a second (DEC-tokens-at-once,
clepsydra_core.auth_tokens.TokenTable). Where the file is a mounted Kubernetes Secret it cannot
be written: the routes answer 409 ``TOKENS_FILE_READ_ONLY`` and the Secret is where tokens
change. With auth off there are no tokens to manage: 404 ``AUTH_OFF``.
"""

from __future__ import annotations

from flask import Blueprint, Response

from clepsydra_core.auth import parse_role
from clepsydra_core.auth_tokens import TokensFileReadOnly, TokenTable, read_entries
from clepsydra_core.errors import ClepsydraError, NotFound, ValidationError
from clepsydra_core.wire.auth import TokenCreate, TokenCreated, TokenInfo, TokenList, TokenRevoked
from clepsydra_store.api.context import ctx
from clepsydra_store.api.web import json_response, request_object

bp = Blueprint("auth", __name__)


class AuthOff(ClepsydraError):
    """With access control off there are no tokens: the collection does not exist."""

    code = "AUTH_OFF"
    http_status = 404


class ReadOnlyTokens(ClepsydraError):
    code = "TOKENS_FILE_READ_ONLY"
    http_status = 409


def _table() -> TokenTable:
    """The token table the store checks requests with, over its tokens file."""
    guard = ctx().guard
    if guard is None or guard.tokens.path is None:
        raise AuthOff("access control is off (CLEPSYDRA_AUTH=off): there are no tokens to "
                      "manage; `clepsydra auth create --file PATH` writes a tokens file")
    return guard.tokens


def _patterns(request: TokenCreate, which: str) -> tuple[str, ...]:
    patterns = request.patterns(which)
    if not all(patterns):
        raise ValidationError(f"token.{which} must be a pattern or a list of patterns, none "
                              "of them empty")
    return patterns


@bp.get("/v1/auth/tokens")
def list_tokens() -> Response:
    path = _table().path
    assert path is not None  # _table() refuses a table without a file
    return json_response(TokenList([TokenInfo.of(e) for e in read_entries(path)]).to_json())


@bp.post("/v1/auth/tokens")
def create() -> Response:
    tokens = _table()
    request = TokenCreate.from_json(request_object(), what="token", strict=True)
    try:
        entry, token = tokens.create(request.name, parse_role(request.role),
                                     topics=_patterns(request, "topics"),
                                     groups=_patterns(request, "groups"),
                                     rate_per_s=request.rate_per_s or 0.0)
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    return json_response(TokenCreated.of(entry, token).to_json(), 201)


@bp.delete("/v1/auth/tokens/<name>")
def revoke(name: str) -> Response:
    try:
        found = _table().revoke(name)
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    if not found:
        raise NotFound(f"no token named {name!r}")
    return json_response(TokenRevoked(name, True).to_json())
