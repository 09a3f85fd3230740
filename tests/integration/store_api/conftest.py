"""Fixtures for the store's HTTP API: the app over a real MessageStore in tmp_path (Flask's
test client, for the many bad-input cases) and the real process (``start_store`` from the
top-level conftest) for end-to-end checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from clepsydra_store.app import create_app
from tests.integration.store_api.helpers import TOPIC, context, settings_for


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    """Factory: make_app(**env) builds an app over a fresh store in tmp_path; every store it
    opened is closed at the end."""
    apps: list[Flask] = []

    def make(**env: str) -> Flask:
        app = create_app(settings_for(tmp_path / f"home{len(apps)}", **env))
        apps.append(app)
        return app

    yield make
    for app in apps:
        context(app).close()


@pytest.fixture(params=["fast", "flask"])
def app(request: pytest.FixtureRequest, make_app: Callable[..., Flask]) -> Flask:
    """The app, once with the produce fast path and once with Flask's produce routes: both
    must answer alike."""
    return make_app(CLEPSYDRA_STORE_FAST_PATH="true" if request.param == "fast" else "false")


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    c = app.test_client()
    assert c.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    return c
