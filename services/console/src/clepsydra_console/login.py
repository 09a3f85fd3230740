"""Who is looking, and the forms' protection (DEC-console-viewer-role).

With ``CLEPSYDRA_AUTH=on`` every page but ``/login``, the static files and the probes asks for
a sign-in: a token of role ``viewer`` (reads everything, changes nothing) or ``admin`` (also
acts), checked against the same tokens file the services read. The token then lives in
Flask's session cookie, signed with ``CLEPSYDRA_CONSOLE_SECRET_KEY``, ``HttpOnly``,
``Secure`` (unless ``CLEPSYDRA_CONSOLE_COOKIE_SECURE=false``) and ``SameSite=Lax``; every call
the console makes for the person carries it, so each service checks the role as well. With
auth off everyone may do everything (and the console says so at start).

Every POST carries the session's CSRF token (a hidden field) and is refused (400
``CSRF_FAILED``) without it; the token is random per session and compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from flask import redirect, request, session, url_for
from werkzeug.wrappers import Response

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import TokenTable
from clepsydra_core.settings import AuthSettings

CONSOLE_ROLES = frozenset({Role.ADMIN, Role.VIEWER})
"""The roles that may sign in to the console."""
OPEN_ENDPOINTS = frozenset({"pages.login", "static", "ops.healthz", "ops.metrics"})
CSRF_FIELD = "csrf"
CLIENT_PREFIX = "console:"
"""The ``X-Client-Id`` of an action (the retry service's DLQ audit): this plus who acted."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: str
    token: str | None

    @property
    def can_act(self) -> bool:
        """Actions (cancel, reschedule, resend, purge, retry now) need ``admin``."""
        return self.role == Role.ADMIN

    @property
    def client_id(self) -> str:
        return CLIENT_PREFIX + self.name


ANONYMOUS = User("anonymous (access control off)", Role.ADMIN, None)


class SignIn:
    """The sign-in rules of one console: ``user()`` of the request, ``sign_in(token)``."""

    def __init__(self, settings: AuthSettings) -> None:
        self.enabled = settings.enabled
        self.tokens = (TokenTable(settings.tokens_file, settings.admin_token)
                       if settings.enabled else None)

    def user(self) -> User | None:
        """The signed-in person (re-checked against the tokens file: a revoked token signs
        out), ANONYMOUS with auth off, None when nobody is signed in."""
        if self.tokens is None:
            return ANONYMOUS
        token = session.get("token")
        if not isinstance(token, str):
            return None
        self.tokens.refresh()
        principal = self.tokens.lookup(token)
        if principal is None or principal.role not in CONSOLE_ROLES:
            session.pop("token", None)
            return None
        return User(principal.name, principal.role, token)

    def sign_in(self, token: str) -> str | None:
        """Sign in with ``token``; why not (None: signed in)."""
        if self.tokens is None:
            return None
        self.tokens.refresh()
        principal = self.tokens.lookup(token.strip())
        if principal is None:
            return "that token is not valid"
        if principal.role not in CONSOLE_ROLES:
            return (f"a token of role {principal.role} cannot sign in to the console: use a "
                    "viewer token (to look) or an admin token (to act)")
        session.clear()
        session["token"] = token.strip()
        session["csrf"] = secrets.token_urlsafe(32)
        session.permanent = True
        return None


def csrf_token() -> str:
    """The session's CSRF token (made on first use)."""
    token = session.get("csrf")
    if not isinstance(token, str):
        token = session["csrf"] = secrets.token_urlsafe(32)
    return token


def csrf_ok() -> bool:
    sent = request.form.get(CSRF_FIELD, "")
    kept = session.get("csrf")
    return isinstance(kept, str) and bool(sent) and hmac.compare_digest(sent, kept)


def to_login() -> Response:
    path = request.full_path if request.query_string else request.path
    return redirect(url_for("pages.login", next=path))
