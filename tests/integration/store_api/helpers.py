"""Helpers of the store API tests (imported by the tests and their conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask

from clepsydra_store.api.context import EXTENSION, StoreContext
from clepsydra_store.settings import StoreSettings
from tests.helpers import store_disk_quota

LEVELS = "1s 2s 3s"
TOPIC = "orders"


def settings_for(home: Path, **env: str) -> StoreSettings:
    return StoreSettings.from_env({"CLEPSYDRA_HOME": str(home), "CLEPSYDRA_DELAY_LEVELS": LEVELS,
                                   "CLEPSYDRA_STORE_PORT": "18081", **store_disk_quota(),
                                   **env})


def context(app: Flask) -> StoreContext:
    ctx: StoreContext = app.extensions[EXTENSION]
    return ctx


def stored_count(client: Any) -> int:
    """Messages in every queue of every topic (system topics included): nothing stored by a
    refused request leaves it unchanged."""
    topics = client.get("/v1/topics").get_json()["topics"]
    return sum(q["maxOffset"] for t in topics for q in t["queues"])


def assert_error(resp: Any, status: int, code: str, rule: str | None = None) -> dict[str, Any]:
    """A v1 error body with the status, code and (when given) the SPEC rule named."""
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/json"
    body: dict[str, Any] = resp.get_json()
    assert set(body) >= {"error", "message"}, body
    assert body["error"] == code, body
    if rule:
        assert f"SPEC {rule}" in body["message"], body
    return body
