"""``clepsydra auth create|list|revoke``: bearer tokens (docs/access-control.md).

With ``--file PATH`` the command works on a tokens file directly (no service needed: the first
tokens of a new deployment, or a Secret's content); without it, through the running store's
``/v1/auth/tokens`` routes with an admin token (``--token`` or CLEPSYDRA_TOKEN; the bootstrap
CLEPSYDRA_AUTH_ADMIN_TOKEN works for the first one). ``create`` prints the new token once, and
only then; nothing else ever shows a token or its hash.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clepsydra_client.cli.commands import Context, Output
from clepsydra_client.cli.render import render_table
from clepsydra_core.auth import Role, parse_role
from clepsydra_core.auth_tokens import create_token, read_entries, revoke_token
from clepsydra_core.errors import NotFound, ValidationError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.auth import TokenCreate, TokenCreated, TokenInfo, TokenList, TokenRevoked
from clepsydra_core.wire.codec import read_answer

TOKENS_ROUTE = "/v1/auth/tokens"


def _patterns(values: list[str] | None) -> list[str]:
    """``--topics a,b --topics c`` -> ``[a, b, c]``."""
    return [p.strip() for v in values or [] for p in v.split(",") if p.strip()]


def _store(ctx: Context) -> HttpClient:
    return HttpClient(ctx.store_url, timeout_s=ctx.timeout_s, service="store", token=ctx.token)


def auth_create(args: argparse.Namespace, ctx: Context) -> Output:
    try:
        role = parse_role(args.role)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    topics, groups = _patterns(args.topics), _patterns(args.groups)
    if role is Role.PRODUCER and not topics:
        raise ValidationError("a producer token needs --topics PATTERN (`*` for every topic)")
    if role is Role.CONSUMER and not (topics and groups):
        raise ValidationError("a consumer token needs --topics PATTERN and --groups PATTERN")
    if args.file:
        entry, token = create_token(Path(args.file), args.name, role, topics=tuple(topics),
                                    groups=tuple(groups), rate_per_s=args.rate or 0.0)
        shown: dict[str, Any] = {"name": entry.name, "role": entry.role.value, "token": token}
    else:
        http = _store(ctx)
        try:
            request = TokenCreate(args.name, role.value, topics, groups, args.rate or None)
            created = read_answer(TokenCreated, http.post(TOKENS_ROUTE, request.to_json()),
                                  "token")
        finally:
            http.close()
        shown = {"name": created.name, "role": created.role, "token": created.token}
    return Output(shown, f"token {shown['name']} ({shown['role']}): {shown['token']}\n"
                         "keep it now: it is not shown again")


def auth_list(args: argparse.Namespace, ctx: Context) -> Output:
    if args.file:
        tokens = [TokenInfo.of(e) for e in read_entries(Path(args.file))]
    else:
        http = _store(ctx)
        try:
            tokens = read_answer(TokenList, http.get(TOKENS_ROUTE), "tokens").tokens
        finally:
            http.close()
    rows = [(t.name, t.role, ",".join(t.topics), ",".join(t.groups)) for t in tokens]
    table = render_table(["NAME", "ROLE", "TOPICS", "GROUPS"], rows,
                         empty="(no tokens: `clepsydra auth create NAME --role ROLE ...`)")
    return Output([t.to_json() for t in tokens], table)


def auth_revoke(args: argparse.Namespace, ctx: Context) -> Output:
    if args.file:
        if not revoke_token(Path(args.file), args.name):
            raise NotFound(f"no token named {args.name!r} in {args.file}")
    else:
        http = _store(ctx)
        try:
            read_answer(TokenRevoked, http.delete(http.path(TOKENS_ROUTE + "/{}", args.name)),
                        "revoke")
        finally:
            http.close()
    return Output(TokenRevoked(args.name, True).to_json(), f"token {args.name} revoked")


def add_auth_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``auth`` sub-command on the ``clepsydra`` parser."""
    auth = sub.add_parser("auth", help="create, list and revoke access tokens")
    actions = auth.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class,
                                  required=True)
    file_help = ("work on this tokens file directly (CLEPSYDRA_AUTH_TOKENS_FILE's format) "
                 "instead of through the store")
    a = actions.add_parser("create", help="create a token; it is printed once, now")
    a.add_argument("name")
    a.add_argument("--role", required=True, choices=[r.value for r in Role])
    a.add_argument("--topics", action="append", metavar="PATTERN",
                   help="topics it may send to (producer) or pull (consumer): shell patterns, "
                        "comma-separated or repeated")
    a.add_argument("--groups", action="append", metavar="PATTERN",
                   help="consumer groups it may consume as (consumer)")
    a.add_argument("--rate", type=float, metavar="PER_S",
                   help="requests a second it may send (default: the services' "
                        "CLEPSYDRA_AUTH_RATE_PER_S; past it: 429 with Retry-After)")
    a.add_argument("--file", help=file_help)
    a.set_defaults(fn=auth_create)
    a = actions.add_parser("list", help="token names and roles (never the tokens)")
    a.add_argument("--file", help=file_help)
    a.set_defaults(fn=auth_list)
    a = actions.add_parser("revoke", help="remove a token")
    a.add_argument("name")
    a.add_argument("--file", help=file_help)
    a.set_defaults(fn=auth_revoke)
