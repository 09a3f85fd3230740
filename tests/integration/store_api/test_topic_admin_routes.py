"""PUT and DELETE /v1/topics/{topic} (rules A1, A2, S3 of docs/semantics.md)
through Flask's test client over a real MessageStore, and the real store process across a
restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core.runtime.http import segment
from tests.integration.store_api.helpers import TOPIC, assert_error, stored_count
from tools.processes import HttpService, free_port

pytestmark = pytest.mark.integration


def test_update_grows_and_shrinks_a_topic(client: FlaskClient) -> None:
    resp = client.put(f"/v1/topics/{TOPIC}", json={"queues": 4})
    assert resp.status_code == 200, resp.get_json()
    assert [q["queueId"] for q in resp.get_json()["queues"]] == [0, 1, 2, 3]
    assert len(client.get(f"/v1/topics/{TOPIC}").get_json()["queues"]) == 4
    resp = client.put(f"/v1/topics/{TOPIC}", json={"queues": 1})
    assert resp.status_code == 200, resp.get_json()
    assert len(resp.get_json()["queues"]) == 1


def test_shrink_with_unconsumed_messages_is_refused_and_changes_nothing(
        client: FlaskClient) -> None:
    assert client.post(f"/v1/topics/{TOPIC}/messages",
                       json={"body": "x", "queueId": 1}).status_code == 201
    body = assert_error(client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}), 409,
                        "TOPIC_NOT_DRAINED", "A1")
    assert "queue 1" in body["message"]
    assert len(client.get(f"/v1/topics/{TOPIC}").get_json()["queues"]) == 2
    assert client.put("/v1/groups/billing/offsets", json={
        "topic": TOPIC, "queueId": 1, "offset": 1}).status_code in (200, 204)
    assert client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 200


@pytest.mark.parametrize("payload", [{}, {"queues": 0}, {"queues": 1025}, {"queues": "2"},
                                     {"queues": 2, "name": TOPIC}])
def test_bad_updates_are_refused(client: FlaskClient, payload: dict[str, Any]) -> None:
    before = stored_count(client)
    resp = client.put(f"/v1/topics/{TOPIC}", json=payload)
    assert resp.status_code == 400, resp.get_json()
    assert len(client.get(f"/v1/topics/{TOPIC}").get_json()["queues"]) == 2
    assert stored_count(client) == before


def test_update_creates_a_missing_topic_and_delete_of_one_is_404(client: FlaskClient) -> None:
    # SPEC A1: PUT is RocketMQ's updateTopic, which creates or updates
    resp = client.put("/v1/topics/fresh", json={"queues": 2})
    assert resp.status_code == 201, resp.get_json()
    assert [q["queueId"] for q in resp.get_json()["queues"]] == [0, 1]
    assert client.put("/v1/topics/fresh", json={"queues": 2}).status_code == 200
    assert_error(client.delete("/v1/topics/nope"), 404, "TOPIC_NOT_EXIST")


def test_delete_then_create_again_starts_empty(client: FlaskClient) -> None:
    assert client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "x"}).status_code == 201
    client.put("/v1/groups/billing/offsets", json={"topic": TOPIC, "queueId": 0, "offset": 1})
    resp = client.delete(f"/v1/topics/{TOPIC}")
    assert resp.status_code == 200
    assert resp.get_json() == {"name": TOPIC, "deleted": True}
    assert_error(client.get(f"/v1/topics/{TOPIC}"), 404, "TOPIC_NOT_EXIST")
    assert client.get("/v1/groups/billing/offsets").get_json()["offsets"] == {}
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 4}).status_code == 201
    queues = client.get(f"/v1/topics/{TOPIC}").get_json()["queues"]
    assert [q["maxOffset"] for q in queues] == [0, 0, 0, 0]


@pytest.mark.parametrize("topic", [naming.SCHEDULE_TOPIC, naming.retry_topic("billing"),
                                   naming.dlq_topic("billing")])
def test_system_topics_are_refused_naming_the_rule(client: FlaskClient, topic: str) -> None:
    # deleteTopic refuses SCHEDULE_TOPIC_XXXX, %RETRY%*, %DLQ%* (S3)
    if topic != naming.SCHEDULE_TOPIC:
        assert client.post("/v1/internal/topics",
                           json={"name": topic, "queues": 1}).status_code == 201
    path = "/v1/topics/" + segment(topic)
    assert_error(client.delete(path), 403, "FORBIDDEN", "S3")
    assert_error(client.put(path, json={"queues": 3}), 403, "FORBIDDEN", "S3")
    assert client.get(path).status_code == 200


def test_read_only_store_refuses_changes(make_app: Callable[..., Any]) -> None:
    app = make_app(CLEPSYDRA_STORE_WRITABLE="false")
    c = app.test_client()
    assert_error(c.put(f"/v1/topics/{TOPIC}", json={"queues": 2}), 403, "NO_PERMISSION", "R2")
    assert_error(c.delete(f"/v1/topics/{TOPIC}"), 403, "NO_PERMISSION", "R2")


def test_changes_survive_a_store_kill_and_restart(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    # SPEC A1: the topic config is written durably before the answer
    home, port = tmp_path / "topics-home", free_port()
    store = start_store(home, port=port)
    url = store.url
    for name in ("grown", "gone"):
        requests.post(f"{url}/v1/topics", json={"name": name, "queues": 1}, timeout=10)
    assert requests.put(f"{url}/v1/topics/grown", json={"queues": 3},
                        timeout=10).status_code == 200
    assert requests.delete(f"{url}/v1/topics/gone", timeout=10).status_code == 200
    store.kill()
    url = start_store(home, port=port, name="store-restarted").url
    assert len(requests.get(f"{url}/v1/topics/grown", timeout=10).json()["queues"]) == 3
    assert requests.get(f"{url}/v1/topics/gone", timeout=10).status_code == 404
