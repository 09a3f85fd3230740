"""What every page needs, built once by ``create_app``: settings, the service clients, the
sign-in rules, the counter samplers; and the request's user and clients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import abort, current_app, g, render_template

from clepsydra_client.admin import AdminClient
from clepsydra_console.backend import Clients
from clepsydra_console.login import SignIn, User, csrf_token
from clepsydra_console.rates import Sampler, ShardSamplers
from clepsydra_console.settings import ConsoleSettings
from clepsydra_core.runtime.http import HttpClient

EXTENSION = "clepsydra_console"


@dataclass(frozen=True, slots=True)
class Console:
    settings: ConsoleSettings
    clients: Clients
    sign_in: SignIn
    store_counters: Sampler
    retry_counters: Sampler
    shard_counters: ShardSamplers
    """The store's counters per store shard (more than one shard: DEC-console-shards)."""


def console() -> Console:
    found: Console = current_app.extensions[EXTENSION]
    return found


def user() -> User:
    """The request's user (the sign-in hook made sure there is one)."""
    found: User = g.user
    return found


def admin() -> AdminClient:
    return console().clients.admin(user().token)


def analytics() -> HttpClient:
    return console().clients.analytics(user().token)


def require_admin() -> User:
    """The user, when they may act; a 403 page otherwise (the viewer role changes nothing)."""
    who = user()
    if not who.can_act:
        abort(403, description=f"role {who.role} may look but not act: actions need an admin "
                               "token")
    return who


def page(template: str, **values: Any) -> str:
    """A page, with what every page shows (the user, the CSRF token, the trace link rule)."""
    c = console()
    return render_template(template, user=g.get("user"), csrf=csrf_token(),
                           auth_on=c.sign_in.enabled,
                           trace_link=c.settings.trace_link, **values)
