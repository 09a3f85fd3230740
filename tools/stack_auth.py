"""Access control for the local stack (`make run` with ``CLEPSYDRA_AUTH=on``): the
scheduler, the retry service and the analytics processes each need a token of their own role;
the console a secret to sign its sign-in cookie (a fresh one each start unless
``CLEPSYDRA_CONSOLE_SECRET_KEY`` is set: sign in again after a restart).
At every start the stack makes fresh ones in the tokens file (``local-scheduler``,
``local-retry``, ``local-analytics``, ``local-gateway``, replacing those of the previous run:
the file keeps only digests, so old ones cannot be read back) and gives each child its
``CLEPSYDRA_TOKEN``. Your own tokens in the file are left alone."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from clepsydra_console.settings import SECRET_VAR
from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token, revoke_token
from clepsydra_core.settings import TOKEN_VAR, AuthSettings
from tools.parts import shard_name

CHILD_ROLES = {
    "retry": Role.RETRY,
    "scheduler": Role.SCHEDULER,
    "scheduler-worker": Role.SCHEDULER,
    "scheduler-beat": Role.SCHEDULER,
    "analytics-export": Role.ANALYTICS,
    "analytics-api": Role.ANALYTICS,
    "analytics-schedule": Role.ANALYTICS,
    "analytics": Role.ANALYTICS,
}
"""The stack's children that call other services, and the role each one's calls need."""
SCOPED = {"gateway": (Role.CONSUMER, ("*",), ("*",))}
"""Children whose token is a scoped role: the gateway's own calls (the send-backs and commits
of deliveries whose time ran out, for any group; its clients' calls carry their own tokens)."""


def service_tokens(auth: AuthSettings, shards: int = 1) -> dict[str, dict[str, str]]:
    """child name -> the environment it adds (its ``CLEPSYDRA_TOKEN``); empty with auth off.
    With more than one store shard the stores get a token too, of the admin role: a shard's own
    calls to its peers (the topics a starting shard takes from them, DEC-store-shards)."""
    if not auth.enabled or auth.tokens_file is None:
        return {}
    roles = dict(CHILD_ROLES)
    if shards > 1:
        roles.update({shard_name(i): Role.ADMIN for i in range(shards)})
    by_role: dict[Role, str] = {}
    for role in sorted(set(roles.values())):
        name = f"local-{role.value}"
        revoke_token(auth.tokens_file, name)
        by_role[role] = create_token(auth.tokens_file, name, role)[1]
    tokens = {child: {TOKEN_VAR: by_role[role]} for child, role in roles.items()}
    for child, (role, topics, groups) in SCOPED.items():
        name = f"local-{child}"
        revoke_token(auth.tokens_file, name)
        tokens[child] = {TOKEN_VAR: create_token(auth.tokens_file, name, role, topics=topics,
                                                 groups=groups)[1]}
    return tokens


def console_secret(env: Mapping[str, str]) -> dict[str, str]:
    """The console's environment addition: its cookie-signing secret (the caller's, else a
    fresh random one)."""
    return {SECRET_VAR: env.get(SECRET_VAR) or secrets.token_urlsafe(32)}
