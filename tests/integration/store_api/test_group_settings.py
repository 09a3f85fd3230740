"""Consumer-group settings kept by the store (SPEC R2, R3, R5)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from clepsydra_core import naming
from tests.integration.store_api.helpers import assert_error, context

pytestmark = pytest.mark.integration


def test_group_settings_are_created_merged_listed_and_kept_on_disk(
        make_app: Callable[..., Flask]) -> None:
    # SPEC R3, R5: defaults 1 retry queue and 16 retries; a PUT changes only what it names
    app = make_app()
    client = app.test_client()
    assert_error(client.get("/v1/groups/billing/settings"), 404,
                 "SUBSCRIPTION_GROUP_NOT_EXIST", "R2")
    created = client.put("/v1/groups/billing/settings")
    assert created.status_code == 201
    assert created.get_json() == {"group": "billing", "retryQueueNums": 1, "retryMaxTimes": 16}
    changed = client.put("/v1/groups/billing/settings", json={"retryMaxTimes": 3})
    assert changed.status_code == 200
    assert changed.get_json() == {"group": "billing", "retryQueueNums": 1, "retryMaxTimes": 3}
    client.put("/v1/groups/audit/settings", json={"retryQueueNums": 0})
    assert client.get("/v1/groups").get_json() == {"groups": [
        {"group": "audit", "retryQueueNums": 0, "retryMaxTimes": 16},
        {"group": "billing", "retryQueueNums": 1, "retryMaxTimes": 3}]}

    home = context(app).settings.engine.data_dir
    context(app).close()
    assert (Path(home) / naming.CONFIG_DIR / naming.GROUP_SETTINGS_FILE).is_file()
    again = make_app(CLEPSYDRA_STORE_DIR=str(home)).test_client()
    assert again.get("/v1/groups/billing/settings").get_json()["retryMaxTimes"] == 3


@pytest.mark.parametrize(("body", "code"), [
    ({"retryMaxTimes": -1}, "INVALID_GROUP_SETTINGS"),
    ({"retryQueueNums": 65}, "INVALID_GROUP_SETTINGS"),
    ({"retryMaxTimes": "3"}, "INVALID_GROUP_SETTINGS"),
    ({"retryMaxTimes": True}, "INVALID_GROUP_SETTINGS"),
    ({"maxRetries": 3}, "INVALID_REQUEST"),
])
def test_bad_group_settings_are_refused_and_change_nothing(
        client: FlaskClient, body: dict[str, object], code: str) -> None:
    client.put("/v1/groups/g/settings", json={"retryMaxTimes": 5})
    assert_error(client.put("/v1/groups/g/settings", json=body), 400, code)
    assert client.get("/v1/groups/g/settings").get_json()["retryMaxTimes"] == 5
    assert_error(client.put("/v1/groups/bad%20name/settings", json={}), 400, "INVALID_TOPIC")


def test_a_first_heartbeat_creates_the_group_unless_turned_off(
        make_app: Callable[..., Flask]) -> None:
    # RocketMQ creates a subscription group the first time it is seen
    client = make_app().test_client()
    beat = {"clientId": "c1", "subscriptions": {"orders": "*"}}
    assert client.post("/v1/groups/fresh/heartbeat", json=beat).status_code == 200
    assert client.get("/v1/groups/fresh/settings").get_json() == {
        "group": "fresh", "retryQueueNums": 1, "retryMaxTimes": 16}
    client.put("/v1/groups/fresh/settings", json={"retryMaxTimes": 4})
    client.post("/v1/groups/fresh/heartbeat", json=beat)  # a later heartbeat changes nothing
    assert client.get("/v1/groups/fresh/settings").get_json()["retryMaxTimes"] == 4
    manual = make_app(CLEPSYDRA_AUTO_CREATE_GROUPS="false").test_client()
    assert manual.post("/v1/groups/fresh/heartbeat", json=beat).status_code == 200
    assert_error(manual.get("/v1/groups/fresh/settings"), 404,
                 "SUBSCRIPTION_GROUP_NOT_EXIST", "R2")


def test_a_body_left_out_keeps_the_settings_and_whitespace_is_not_json(
        client: FlaskClient) -> None:
    # the body may be left out (no bytes: the current settings, or the defaults); a body of
    # whitespace is a body, and not a JSON object (the fuzzer's "\r")
    client.put("/v1/groups/g/settings", json={"retryMaxTimes": 5})
    kept = client.put("/v1/groups/g/settings", data=b"", content_type="application/json")
    assert kept.status_code == 200 and kept.get_json()["retryMaxTimes"] == 5
    for blank in (b"\r", b" \n"):
        assert_error(client.put("/v1/groups/g/settings", data=blank,
                                content_type="application/json"), 400, "INVALID_JSON")
    assert client.get("/v1/groups/g/settings").get_json()["retryMaxTimes"] == 5
