"""Who a RocketMQ client is (DEC-gateway-credentials): with ``CLEPSYDRA_AUTH=on`` the client's
``Credentials(access_key, access_secret)`` carry a Clepsydra token as the access key, checked
against the same tokens file as every service (clepsydra_core.auth_tokens), and its role
decides what it may do, as over HTTP (clepsydra_core.auth). Off, anyone who reaches the port
may do anything.

The protocol signs each call with the secret (HMAC-SHA1 of the call's date): the gateway
cannot check that signature, since the tokens file keeps only the tokens' digests, and does not
need to: the token itself authenticates, as the bearer token does over HTTP. The secret is
therefore not checked (any value, e.g. the token's name).
"""

from __future__ import annotations

from collections.abc import Mapping

from clepsydra_core.auth import Action, Principal, denial
from clepsydra_core.auth_tokens import TokenTable
from clepsydra_core.settings import AuthSettings
from clepsydra_gateway.mapping import GatewayError, Status, access_key


class Access:
    def __init__(self, settings: AuthSettings) -> None:
        self.enabled = settings.enabled
        self._table = (TokenTable(settings.tokens_file, settings.admin_token)
                       if settings.enabled else None)

    def who(self, metadata: Mapping[str, str]) -> tuple[Principal | None, str | None]:
        """(the principal, its token) of a call; (None, None) with auth off. GatewayError
        UNAUTHORIZED without a valid token."""
        if self._table is None:
            return None, None
        token = access_key(metadata.get("authorization"))
        principal = self._table.lookup(token) if token else None
        if principal is None or token is None:
            raise GatewayError(Status.UNAUTHORIZED,
                               "unauthenticated: give Credentials(access_key=<a Clepsydra "
                               "token>, access_secret=<anything>) (CLEPSYDRA_AUTH=on)")
        return principal, token

    @staticmethod
    def check(principal: Principal | None, action: Action, resource: str | None) -> None:
        """GatewayError FORBIDDEN naming what the token's role lacks."""
        if principal is None:
            return
        why = denial(principal, action, resource)
        if why is not None:
            raise GatewayError(Status.FORBIDDEN, why)
