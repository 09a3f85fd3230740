"""The edge check every Flask service shares: 401 with
``WWW-Authenticate: Bearer`` for a missing or unknown token, 403 naming what the role lacks,
probes open, a route nobody decided about refused at start, remembered decisions dropped when
the tokens change."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Blueprint, Flask

from clepsydra_core.auth import Action, Role
from clepsydra_core.auth_tokens import TokenTable, create_token, revoke_token
from clepsydra_core.errors import Forbidden, Unauthorized
from clepsydra_core.settings import AuthSettings
from clepsydra_web.auth import Guard, Need, install


def _app(tokens: Path) -> Flask:
    app = Flask("t")
    ops = Blueprint("ops", __name__)
    ops.add_url_rule("/healthz", "healthz", lambda: "ok")
    app.register_blueprint(ops)
    app.add_url_rule("/v1/topics/<topic>/messages", "send", lambda topic: "sent",
                     methods=["POST"])
    install(app, AuthSettings(enabled=True, tokens_file=tokens),
            {"send": Need(Action.SEND, "topic")}, service="test")
    return app


def test_hook_answers_401_403_and_leaves_probes_open(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _, token = create_token(path, "p", Role.PRODUCER, topics=("a*",))
    client = _app(path).test_client()
    assert client.get("/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": token}):
        resp = client.post("/v1/topics/abc/messages", headers=headers)
        assert resp.status_code == 401 and resp.json["error"] == "UNAUTHORIZED"
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/v1/unknown").status_code == 401  # no token: nothing revealed
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get("/v1/unknown", headers=auth).status_code == 404
    assert client.post("/v1/topics/abc/messages", headers=auth).status_code == 200
    resp = client.post("/v1/topics/zzz/messages", headers=auth)
    assert resp.status_code == 403 and resp.json == {
        "error": "FORBIDDEN", "message": "role producer may not write topic zzz: it matches none "
                                         "of the token's topic patterns (a*)"}


def test_a_route_without_a_rule_stops_the_start(tmp_path: Path) -> None:
    app = Flask("t")
    app.add_url_rule("/v1/forgotten", "forgotten", lambda: "x")
    with pytest.raises(RuntimeError, match="forgotten"):
        install(app, AuthSettings(enabled=True, tokens_file=tmp_path / "t.json"), {},
                service="test")


def test_remembered_decisions_end_with_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _, token = create_token(path, "p", Role.PRODUCER, topics=("*",))
    guard = Guard(TokenTable(path, check_every_s=0.0))
    header = f"Bearer {token}"
    assert guard.check(header, Action.SEND, "t").name == "p"
    assert guard.check(header, Action.SEND, "t").name == "p"  # remembered
    with pytest.raises(Forbidden):
        guard.check(header, Action.TOPIC_ADMIN, None)
    revoke_token(path, "p")
    with pytest.raises(Unauthorized):
        guard.check(header, Action.SEND, "t")


def test_a_decision_taken_from_old_tokens_is_not_remembered_for_new_ones(
        tmp_path: Path) -> None:
    """A check that looked the token up before a revocation remembers its decision with the
    old tokens only: the next check, on the new tokens, refuses it (DEC-tokens-at-once)."""
    path = tmp_path / "tokens.json"
    table = TokenTable(path, check_every_s=3600.0)
    _, token = table.create("p", Role.PRODUCER, topics=("*",))
    guard = Guard(table)
    header = f"Bearer {token}"
    generation, old = guard._allowed
    assert guard.check(header, Action.SEND, "t").name == "p"
    stale = guard.principal(header)  # a check in flight, its lookup done before the revoke
    assert table.revoke("p")
    old[(header, Action.SEND, "u")] = stale  # ... which then writes what it decided
    with pytest.raises(Unauthorized):
        guard.check(header, Action.SEND, "u")
    assert guard._allowed[0] > generation
