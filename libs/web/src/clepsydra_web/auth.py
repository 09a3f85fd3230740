"""Access control at the edge of every HTTP service (docs/access-control.md),
the same way everywhere.

Each service gives a table: endpoint -> :class:`Need` (the action, and the view argument that
names its topic or group). :func:`install` adds one ``before_request`` hook that answers:

- 401 ``UNAUTHORIZED`` with ``WWW-Authenticate: Bearer`` when the ``Authorization: Bearer``
  token is missing or unknown (the same answer for an unknown route: nothing is revealed to a
  caller without a token);
- 403 ``FORBIDDEN`` naming what the token's role lacks (clepsydra_core.auth.denial);
- 429 ``RATE_LIMITED`` with ``Retry-After`` when the token is over its requests a second
  (rate_limit.py).

The ops routes (``/healthz``, ``/livez``, ``/metrics``, ``/openapi.json``) stay open to probes.
Every other route must be in the table: :func:`install` refuses to start a service with a route
nobody decided about. With ``CLEPSYDRA_AUTH=off`` nothing is checked and the service logs one
warning line at start.

:class:`Guard` is the framework-free part, also used by the store's WSGI produce path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Flask, Response, request

from clepsydra_core.auth import Action, Principal, denial
from clepsydra_core.auth_tokens import TokenTable
from clepsydra_core.errors import Forbidden, RateLimited, Unauthorized
from clepsydra_core.settings import AUTH_VAR, AuthSettings
from clepsydra_web.errors import JSON_TYPE
from clepsydra_web.rate_limit import RateLimiter

logger = logging.getLogger(__name__)

OPEN_ENDPOINTS = frozenset({"ops.healthz", "ops.livez", "ops.metrics", "ops.openapi"})
"""Open to anyone, auth on or off: probes and the API description."""
CHALLENGE = ("WWW-Authenticate", 'Bearer realm="clepsydra"')
_BEARER = "bearer "
_MISSING = Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
_UNKNOWN = Unauthorized("the bearer token is not valid")


@dataclass(frozen=True, slots=True)
class Need:
    """What a route needs: ``action`` on the resource named by the view argument ``arg``
    (None: the action alone)."""

    action: Action
    arg: str | None = None


PermissionTable = Mapping[str, Need]


_DECISIONS_MAX = 10_000


class Guard:
    """Authenticates a request's bearer token and checks a need against its principal.

    Allowed (header, action, resource) triples are remembered until the tokens change, so a
    client sending to the same topic again costs one dict lookup (the produce fast path)."""

    def __init__(self, tokens: TokenTable, limiter: RateLimiter | None = None) -> None:
        self.tokens = tokens
        self.limiter = limiter or RateLimiter(0.0)
        self._allowed: tuple[int, dict[tuple[str, Action, str | None], Principal]] = (
            tokens.generation, {})
        """The decisions of one generation of the tokens, replaced whole when they change: a
        check that read the old tokens writes into the old dict, never into the new one."""

    @classmethod
    def from_settings(cls, settings: AuthSettings) -> Guard:
        return cls(TokenTable(settings.tokens_file, settings.admin_token),
                   RateLimiter(settings.rate_per_s))

    def principal(self, header: str | None) -> Principal:
        """The principal of an ``Authorization`` header value; Unauthorized otherwise."""
        if not header:
            raise _MISSING
        if header[:7].lower() != _BEARER:
            raise _MISSING
        found = self.tokens.lookup(header[7:].strip())
        if found is None:
            raise _UNKNOWN
        return found

    def check(self, header: str | None, action: Action, resource: str | None) -> Principal:
        """The request's principal when it may do ``action`` on ``resource``; Unauthorized,
        Forbidden (the message naming what is missing) or RateLimited otherwise."""
        self.tokens.refresh()
        generation, allowed = self._allowed
        if generation != self.tokens.generation:
            allowed = {}
            self._allowed = (self.tokens.generation, allowed)
        key = (header or "", action, resource)
        found = allowed.get(key)
        if found is not None:
            self.limiter.take(found)
            return found
        principal = self.principal(header)
        why = denial(principal, action, resource)
        if why is not None:
            raise Forbidden(why)
        if len(allowed) >= _DECISIONS_MAX:
            allowed.clear()
        allowed[key] = principal
        self.limiter.take(principal)
        return principal


Refusal = Unauthorized | Forbidden | RateLimited
REFUSALS = (Unauthorized, Forbidden, RateLimited)
"""What :meth:`Guard.check` raises."""


def refusal(exc: Refusal) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a 401, 403 or 429 answer."""
    body = orjson.dumps(exc.to_json())
    headers = [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body)))]
    if isinstance(exc, Unauthorized):
        headers.append(CHALLENGE)
    elif isinstance(exc, RateLimited):
        headers.append(("Retry-After", str(exc.retry_after_s)))
    return exc.http_status, headers, body


def warn_if_off(settings: AuthSettings, service: str) -> None:
    if not settings.enabled:
        logger.warning("access control is off: the %s answers anyone who reaches its port "
                       "(%s=off; set it to on with a tokens file, docs/access-control.md)",
                       service, AUTH_VAR)


def install(app: Flask, settings: AuthSettings, table: PermissionTable, *,
            service: str, checked_in_view: frozenset[str] = frozenset()) -> Guard | None:
    """Check every request of ``app`` against ``table`` (nothing when auth is off: one warning
    line). Install it after the hooks that time or trace requests, so refusals are counted.
    ``checked_in_view``: endpoints whose views check the table's need themselves with the
    returned guard (the store's envelope), left alone here. ConfigError-like RuntimeError when
    a route of ``app`` is in neither the table nor :data:`OPEN_ENDPOINTS`."""
    undecided = sorted(r.endpoint for r in app.url_map.iter_rules()
                       if r.endpoint not in table and r.endpoint not in OPEN_ENDPOINTS
                       and r.endpoint != "static")
    if undecided:
        raise RuntimeError(f"{service}: routes without an access rule: {', '.join(undecided)}")
    warn_if_off(settings, service)
    if not settings.enabled:
        return None
    guard = Guard.from_settings(settings)

    @app.before_request
    def _authorize() -> Response | None:
        endpoint = request.endpoint
        if endpoint in OPEN_ENDPOINTS or endpoint in checked_in_view:
            return None
        header = request.headers.get("Authorization")
        try:
            need = table.get(endpoint) if endpoint is not None else None
            if need is None:  # an unknown route or method: a token first, then the 404/405
                guard.principal(header)
                return None
            args: Mapping[str, Any] = request.view_args or {}
            resource = str(args[need.arg]) if need.arg is not None else None
            guard.check(header, need.action, resource)
        except REFUSALS as exc:
            status, headers, body = refusal(exc)
            return Response(body, status=status, headers=headers[2:], mimetype=JSON_TYPE)
        return None

    logger.info("access control on service=%s tokens_file=%s", service, settings.tokens_file)
    return guard
