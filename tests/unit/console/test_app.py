"""The console's app with the Flask test client (no service behind it: every look-up fails, and
the pages must say so rather than show an empty list; DEC-console-honest-lists), its sign-in
with a tokens file (DEC-console-viewer-role), CSRF on every POST, the security headers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from clepsydra_console.app import create_app
from clepsydra_console.settings import ConsoleSettings
from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token
from clepsydra_core.errors import ConfigError

NOWHERE = "http://127.0.0.1:9"
SECRET = "s" * 40


def _settings(tmp_path: Path, **env: str) -> ConsoleSettings:
    return ConsoleSettings.from_env({
        "CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_STORE_URL": NOWHERE,
        "CLEPSYDRA_RETRY_URL": NOWHERE, "CLEPSYDRA_CONSOLE_TIMEOUT_S": "0.5",
        "CLEPSYDRA_CONSOLE_COOKIE_SECURE": "false", **env})


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens.json"
    return {name: create_token(path, name, role)[1]
            for name, role in (("admin", Role.ADMIN), ("viewer", Role.VIEWER),
                               ("consumer", Role.CONSUMER))}


@pytest.fixture
def app(tmp_path: Path, tokens: dict[str, str]) -> Flask:
    return create_app(_settings(tmp_path, CLEPSYDRA_AUTH="on",
                                CLEPSYDRA_AUTH_TOKENS_FILE=str(tmp_path / "tokens.json"),
                                CLEPSYDRA_CONSOLE_SECRET_KEY=SECRET))


def _csrf(client: FlaskClient, path: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(path).get_data(as_text=True))
    assert found is not None, path
    return found.group(1)


def _sign_in(client: FlaskClient, token: str) -> None:
    resp = client.post("/login", data={"csrf": _csrf(client, "/login"), "token": token,
                                       "next": "/timers"})
    assert resp.status_code == 302 and resp.headers["Location"] == "/timers"


def test_settings_need_a_secret_with_auth_on(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CLEPSYDRA_CONSOLE_SECRET_KEY"):
        _settings(tmp_path, CLEPSYDRA_AUTH="on", CLEPSYDRA_AUTH_ADMIN_TOKEN="clp_x" * 10)
    with pytest.raises(ConfigError, match="at least 32"):
        _settings(tmp_path, CLEPSYDRA_CONSOLE_SECRET_KEY="short")
    trace = _settings(tmp_path, CLEPSYDRA_CONSOLE_TRACE_URL="http://jaeger:16686/")
    assert trace.trace_link("ab" * 16) == "http://jaeger:16686/trace/" + "ab" * 16
    assert _settings(tmp_path).trace_link("ab" * 16) is None


def test_every_page_asks_for_a_sign_in(app: Flask) -> None:
    client = app.test_client()
    for path in ("/", "/timers", "/groups", "/groups/g", "/topics", "/topics/t", "/dlq",
                 "/dlq/g", "/dlq/g/audit", "/messages/ABC"):
        resp = client.get(path)
        assert resp.status_code == 302 and "/login?next=" in resp.headers["Location"], path
    assert client.get("/healthz").status_code == 200
    with client.get("/static/console.css") as css:
        assert css.status_code == 200
    assert client.post("/messages/ABC/cancel").status_code == 302  # not signed in: no action


def test_sign_in_refuses_wrong_tokens_and_foreign_next(app: Flask,
                                                       tokens: dict[str, str]) -> None:
    client = app.test_client()
    for token, why in (("clp_wrong", "not valid"), (tokens["consumer"], "role consumer")):
        body = client.post("/login", data={"csrf": _csrf(client, "/login"), "token": token}
                           ).get_data(as_text=True)
        assert why in body
    resp = client.post("/login", data={"csrf": _csrf(client, "/login"),
                                       "token": tokens["viewer"], "next": "//evil.example/x"})
    assert resp.headers["Location"] == "/"
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_a_viewer_may_look_but_not_act(app: Flask, tokens: dict[str, str]) -> None:
    client = app.test_client()
    _sign_in(client, tokens["viewer"])
    page = client.get("/timers")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "The look-up failed" in text and "No pending timer" not in text  # not "nothing"
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert page.headers["X-Frame-Options"] == "DENY"
    csrf = _csrf(client, "/")
    resp = client.post("/messages/ABC/cancel", data={"csrf": csrf})
    assert resp.status_code == 403 and "actions need an admin" in resp.get_data(as_text=True)
    resp = client.post("/dlq/g/act", data={"csrf": csrf, "action": "purge", "msgId": "A"})
    assert resp.status_code == 403


def test_every_post_needs_the_session_csrf_token(app: Flask, tokens: dict[str, str]) -> None:
    client = app.test_client()
    _sign_in(client, tokens["admin"])
    for data in ({}, {"csrf": "forged"}):
        resp = client.post("/dlq/g/act", data={**data, "action": "purge", "msgId": "A"})
        assert resp.status_code == 400 and "CSRF_FAILED" in resp.get_data(as_text=True)
    assert client.post("/login", data={"token": tokens["admin"]}).status_code == 200  # re-asked
    csrf = _csrf(client, "/")
    done = client.post("/dlq/g/act", data={"csrf": csrf, "action": "purge", "msgId": "A"})
    body = done.get_data(as_text=True)  # the retry service is down: the outcome says so
    assert done.status_code == 200 and 'data-ok="no"' in body and "did not answer" in body
    assert client.post("/logout", data={"csrf": csrf}).status_code == 302
    assert client.get("/timers").status_code == 302


def test_with_auth_off_everyone_acts(tmp_path: Path) -> None:
    client = create_app(_settings(tmp_path)).test_client()
    page = client.get("/").get_data(as_text=True)
    assert "access control off" in page and "The look-up failed" in page
