"""The store as a real process (`python -m clepsydra_store` under gunicorn), over HTTP."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.store_api.helpers import LEVELS, TOPIC
from tools.processes import HttpService, free_port, wait_until

pytestmark = pytest.mark.integration

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def pull_all(url: str, topic_path: str, queue_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = requests.get(f"{url}/v1/topics/{topic_path}/queues/{queue_id}/messages",
                            params={"offset": offset, "max": 1000}, timeout=10).json()
        out += page["messages"]
        if page["nextOffset"] >= page["maxOffset"]:
            return out
        offset = page["nextOffset"]


def test_end_to_end_produce_pull_and_trace(tmp_path: Path,
                                           start_store: Callable[..., HttpService]) -> None:
    spans_file = tmp_path / "spans.jsonl"
    store = start_store(env={"CLEPSYDRA_DELAY_LEVELS": LEVELS,
                             "CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}"})
    url = store.url
    with requests.Session() as http:
        assert http.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}).status_code == 201
        put = http.post(f"{url}/v1/topics/{TOPIC}/messages", json={"body": "hello", "tags": "t"},
                        headers={"traceparent": TRACEPARENT})
        assert put.status_code == 201
        msg_id = put.json()["msgId"]
        batch = http.post(f"{url}/v1/topics/{TOPIC}/messages/batch",
                          json={"messages": [{"body": "b1"}, {"bodyBase64": "/w=="}]})
        assert batch.status_code == 201 and len(batch.json()["results"]) == 2
        [first, b1, b2] = pull_all(url, TOPIC, 0)
        assert (first["body"], b1["body"], b2["bodyBase64"]) == ("hello", "b1", "/w==")
        assert first["properties"]["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1]
        assert "traceparent" in b1["properties"]
        assert first["bornHost"].startswith("127.0.0.1:")
        bad = http.post(f"{url}/v1/topics/{TOPIC}/messages", data=b"{oops",
                        headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"] == "INVALID_JSON"
        assert http.get(f"{url}/v1/messages/{msg_id}").json()["messages"][0]["body"] == "hello"
        assert http.get(f"{url}/openapi.json").json()["openapi"].startswith("3.")
        assert "clepsydra_store_requests_total" in http.get(f"{url}/metrics").text
    # SPEC O1: the produce span continues the caller's trace with messaging attributes
    wait_until(lambda: spans_file.exists() and "store.produce" in spans_file.read_text(), 10,
               what="spans")
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    produce = next(s for s in spans if s["name"] == "store.produce")
    assert produce["traceId"] == TRACEPARENT.split("-")[1]
    assert produce["parentSpanId"] == TRACEPARENT.split("-")[2]
    assert produce["attributes"]["messaging.destination.name"] == TOPIC
    assert produce["attributes"]["messaging.message.id"] == msg_id
    assert first["properties"]["traceparent"].split("-")[2] == produce["spanId"]
    assert {"store.produce_batch", "store.pull", "store.get_message"} <= {s["name"] for s in spans}


def test_percent_encoded_retry_topic_over_http(start_store: Callable[..., HttpService]) -> None:
    url = start_store().url
    put = requests.post(f"{url}/v1/topics/%25RETRY%25G/messages", json={"body": "r"}, timeout=10)
    assert put.status_code == 201, put.text
    assert put.json()["topic"] == "%RETRY%G"
    assert requests.get(f"{url}/v1/topics/%25RETRY%25G", timeout=10).json()["name"] == "%RETRY%G"
    assert [m["body"] for m in pull_all(url, "%25RETRY%25G", 0)] == ["r"]


def test_level_one_message_is_handed_over_when_due(
        start_store: Callable[..., HttpService]) -> None:
    # SPEC S1, D3-D5, D9 over HTTP, with CLEPSYDRA_DELAY_LEVELS="1s 2s 3s"
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": LEVELS}).url
    requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}, timeout=10)
    put = requests.post(f"{url}/v1/topics/{TOPIC}/messages",
                        json={"body": "in a second", "delayLevel": 1}, timeout=10).json()
    assert put["topic"] == "SCHEDULE_TOPIC_XXXX"
    [deliver_ts] = requests.get(f"{url}/v1/schedule/levels/1/entries", timeout=10).json()[
        "deliverTs"]
    delivered = 0

    def handed_over() -> bool:
        nonlocal delivered
        r = requests.post(f"{url}/v1/schedule/levels/1/handover", json={"fromOffset": 0},
                          timeout=10).json()
        delivered += r["delivered"]
        return bool(r["nextOffset"] == 1)

    wait_until(handed_over, 15, interval_s=0.2, what="hand-over")
    assert delivered == 1
    assert time.time() * 1000 >= deliver_ts  # never early
    [msg] = pull_all(url, TOPIC, 0)
    assert msg["body"] == "in a second"
    level = requests.get(f"{url}/v1/schedule/levels", timeout=10).json()["levels"][0]
    assert level["handedOver"] == 0


def test_consumers_expire_in_the_real_service(start_store: Callable[..., HttpService]) -> None:
    url = start_store(env={"CLEPSYDRA_STORE_CONSUMER_EXPIRY_MS": "300"}).url
    hb = requests.post(f"{url}/v1/groups/G/heartbeat",
                       json={"clientId": "c1", "subscriptions": {TOPIC: "*"}}, timeout=10)
    assert hb.json()["consumers"] == ["c1"]
    wait_until(lambda: requests.get(f"{url}/v1/groups/G/consumers", timeout=10).json()[
        "consumers"] == [], 10, what="consumer expiry")


def test_read_only_service(start_store: Callable[..., HttpService]) -> None:
    url = start_store(env={"CLEPSYDRA_STORE_WRITABLE": "false"}).url
    assert requests.get(f"{url}/healthz", timeout=10).json() == {"status": "ok",
                                                                 "writable": False}
    resp = requests.post(f"{url}/v1/topics/%25RETRY%25G/messages", json={"body": "a"},
                         timeout=10)
    assert resp.status_code == 403 and resp.json()["error"] == "NO_PERMISSION"


def test_acknowledged_messages_survive_kill_9(tmp_path: Path,
                                              start_store: Callable[..., HttpService]) -> None:
    # SPEC P2, P3: kill -9 of the store, then restart: every acknowledged message is there
    home = tmp_path / "crash-home"
    port = free_port()
    store = start_store(home, port=port)
    url = store.url
    requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 2}, timeout=10)
    acked: dict[tuple[int, int], bytes] = {}
    with requests.Session() as http:
        for i in range(40):
            body = os.urandom(64 + i)
            r = http.post(f"{url}/v1/topics/{TOPIC}/messages",
                          json={"bodyBase64": base64.b64encode(body).decode(), "keys": f"k{i}"})
            assert r.status_code == 201
            acked[(r.json()["queueId"], r.json()["queueOffset"])] = body
        for b in range(5):
            texts = [f"batch {b} message {j} ✓" for j in range(20)]
            r = http.post(f"{url}/v1/topics/{TOPIC}/messages/batch",
                          json={"messages": [{"body": t} for t in texts]})
            assert r.status_code == 201
            for t, res in zip(texts, r.json()["results"], strict=True):
                acked[(res["queueId"], res["queueOffset"])] = t.encode()
    store.kill()
    assert not store.alive()
    restarted = start_store(home, port=port, name="store-restarted")
    found: dict[tuple[int, int], bytes] = {}
    for qid in (0, 1):
        for m in pull_all(restarted.url, TOPIC, qid):
            raw = base64.b64decode(m["bodyBase64"]) if "bodyBase64" in m else m["body"].encode()
            found[(m["queueId"], m["queueOffset"])] = raw
    for place, body in acked.items():
        assert found.get(place) == body, place


def test_sigterm_closes_the_store_cleanly(start_store: Callable[..., HttpService]) -> None:
    store = start_store()
    requests.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 1}, timeout=10)
    assert store.stop() == 0
    assert "message store closed" in store.log()
