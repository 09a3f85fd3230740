"""Tokens through a running store (``clepsydra auth ...`` without ``--file``): list, create,
revoke, admin only (the route table, contract.py). They rewrite the store's tokens file
(CLEPSYDRA_AUTH_TOKENS_FILE) atomically through the store's own token table, so the store
answers from the new tokens as soon as the route has answered; the other services reading that
file accept a new token at once and refuse a revoked one within a second (DEC-tokens-at-once,
clepsydra_core.auth_tokens.TokenTable). Where the file is a mounted Kubernetes Secret it cannot
be written: the routes answer 409 ``TOKENS_FILE_READ_ONLY`` and the Secret is where tokens
change. With auth off there are no tokens to manage: 404 ``AUTH_OFF``.
"""

from __future__ import annotations

from clepsydra_core.auth import parse_role
from clepsydra_core.auth_tokens import TokensFileReadOnly, TokenTable, read_entries
from clepsydra_core.errors import ClepsydraError, NotFound, ValidationError
from clepsydra_core.wire.auth import TokenCreate, TokenCreated, TokenInfo, TokenList, TokenRevoked
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply


class AuthOff(ClepsydraError):
    """With access control off there are no tokens: the collection does not exist."""

    code = "AUTH_OFF"
    http_status = 404


class ReadOnlyTokens(ClepsydraError):
    code = "TOKENS_FILE_READ_ONLY"
    http_status = 409


def _table(c: StoreContext) -> TokenTable:
    """The token table the store checks requests with, over its tokens file."""
    guard = c.guard
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


def list_tokens(c: StoreContext, call: Call) -> Reply:
    path = _table(c).path
    assert path is not None  # _table() refuses a table without a file
    return 200, TokenList([TokenInfo.of(e) for e in read_entries(path)]).to_json()


def create(c: StoreContext, call: Call) -> Reply:
    tokens = _table(c)
    request = TokenCreate.from_json(call.json(), what="token", strict=True)
    try:
        entry, token = tokens.create(request.name, parse_role(request.role),
                                     topics=_patterns(request, "topics"),
                                     groups=_patterns(request, "groups"),
                                     rate_per_s=request.rate_per_s or 0.0)
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    return 201, TokenCreated.of(entry, token).to_json()


def revoke(c: StoreContext, call: Call) -> Reply:
    name = call.args["name"]
    try:
        found = _table(c).revoke(name)
    except TokensFileReadOnly as exc:
        raise ReadOnlyTokens(exc.message) from None
    if not found:
        raise NotFound(f"no token named {name!r}")
    return 200, TokenRevoked(name, True).to_json()
