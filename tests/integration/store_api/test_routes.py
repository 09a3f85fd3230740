"""Happy paths of every store route through Flask's test client over a real MessageStore."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from clepsydra_core.msgid import decode_msg_id
from clepsydra_store.consumers import ConsumerRegistry
from tests.integration.store_api.helpers import TOPIC, assert_error, context, stored_count
from tools.processes import wait_until

pytestmark = pytest.mark.integration

PRODUCE = f"/v1/topics/{TOPIC}/messages"
BATCH = f"/v1/topics/{TOPIC}/messages/batch"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def pull(client: FlaskClient, topic: str, queue_id: int = 0, **query: Any) -> dict[str, Any]:
    resp = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", query_string=query)
    assert resp.status_code == 200, resp.get_json()
    body: dict[str, Any] = resp.get_json()
    return body


def pull_all(client: FlaskClient, topic: str, queues: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for qid in range(queues):
        out += pull(client, topic, qid, max=1000)["messages"]
    return out


def test_topics_create_list_show(client: FlaskClient) -> None:
    created = client.post("/v1/topics", json={"name": "payments", "queues": 3})
    assert created.status_code == 201
    assert created.get_json() == {"name": "payments", "system": False, "queues": [
        {"queueId": q, "minOffset": 0, "maxOffset": 0} for q in range(3)]}
    again = client.post("/v1/topics", json={"name": "payments", "queues": 3})
    assert again.status_code == 200
    assert_error(client.post("/v1/topics", json={"name": "payments", "queues": 4}), 409,
                 "TOPIC_CONFLICT")
    names = {t["name"] for t in client.get("/v1/topics").get_json()["topics"]}
    assert {"payments", TOPIC, "SCHEDULE_TOPIC_XXXX"} <= names
    shown = client.get("/v1/topics/payments").get_json()
    assert len(shown["queues"]) == 3


def test_produce_one_then_pull_it(client: FlaskClient) -> None:
    resp = client.post(PRODUCE, json={"body": "héllo", "tags": "a", "keys": "k1 k2",
                                      "properties": {"p": "v"}, "queueId": 1, "flag": 7,
                                      "bornTimestamp": 1234})
    assert resp.status_code == 201
    result = resp.get_json()
    assert set(result) == {"msgId", "offsetMsgId", "topic", "queueId", "queueOffset",
                           "commitLogOffset", "storeTimestamp"}
    assert (result["topic"], result["queueId"], result["queueOffset"]) == (TOPIC, 1, 0)
    assert decode_msg_id(result["offsetMsgId"]).commitlog_offset == result["commitLogOffset"]
    page = pull(client, TOPIC, 1)
    assert (page["nextOffset"], page["minOffset"], page["maxOffset"]) == (1, 0, 1)
    [msg] = page["messages"]
    assert msg["body"] == "héllo"
    assert (msg["tags"], msg["keys"], msg["flag"], msg["bornTimestamp"]) == ("a", "k1 k2", 7, 1234)
    assert msg["properties"]["p"] == "v"
    assert msg["bornHost"].startswith("127.0.0.1:")
    for field in ("msgId", "offsetMsgId", "topic", "queueId", "queueOffset", "commitLogOffset",
                  "storeTimestamp", "storeHost", "reconsumeTimes", "sysFlag"):
        assert field in msg
    assert (msg["msgId"], msg["offsetMsgId"]) == (result["msgId"], result["offsetMsgId"])


def test_binary_body_round_trips_as_base64(client: FlaskClient) -> None:
    raw = bytes(range(256))
    resp = client.post(PRODUCE, json={"bodyBase64": base64.b64encode(raw).decode(),
                                      "queueId": 0})
    assert resp.status_code == 201
    [msg] = pull(client, TOPIC, 0)["messages"]
    assert base64.b64decode(msg["bodyBase64"]) == raw


def test_produced_message_carries_traceparent(client: FlaskClient) -> None:
    # SPEC O1: injected when absent, continuing the caller's trace (header or property)
    client.post(PRODUCE, json={"body": "a", "queueId": 0}, headers={"traceparent": TRACEPARENT})
    client.post(PRODUCE, json={"body": "b", "queueId": 0})
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    client.post(PRODUCE, json={"body": "c", "queueId": 0, "properties": {"traceparent": own}})
    a, b, c = pull(client, TOPIC, 0)["messages"]
    assert a["properties"]["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1]
    assert a["properties"]["traceparent"].split("-")[2] != TRACEPARENT.split("-")[2]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", b["properties"]["traceparent"])
    assert c["properties"]["traceparent"] == own


def test_batch_is_stored_in_order(client: FlaskClient) -> None:
    messages = [{"body": f"m{i}", "queueId": 0, "keys": f"key{i}"} for i in range(5)]
    resp = client.post(BATCH, json={"messages": messages})
    assert resp.status_code == 201
    results = resp.get_json()["results"]
    assert [r["queueOffset"] for r in results] == list(range(5))
    assert [m["body"] for m in pull(client, TOPIC, 0)["messages"]] == [f"m{i}" for i in range(5)]
    headers = pull(client, TOPIC, 0, body="false")["messages"]
    assert [m["keys"] for m in headers] == [f"key{i}" for i in range(5)]
    assert [m["msgId"] for m in headers] == [r["msgId"] for r in results]
    assert not any("body" in m or "bodyBase64" in m for m in headers)  # headers only


def test_pull_filters_by_tags(client: FlaskClient) -> None:
    # SPEC C3
    for tag in ("a", "b", "c", "a", None):
        client.post(PRODUCE, json={"body": str(tag), "tags": tag, "queueId": 0})
    assert [m["tags"] for m in pull(client, TOPIC, 0, tags="a")["messages"]] == ["a", "a"]
    assert [m["tags"] for m in pull(client, TOPIC, 0, tags="a || c")["messages"]] == \
        ["a", "c", "a"]
    assert len(pull(client, TOPIC, 0, tags="*")["messages"]) == 5
    page = pull(client, TOPIC, 0, offset=1, max=2)
    assert [m["queueOffset"] for m in page["messages"]] == [1, 2]
    assert page["nextOffset"] == 3
    assert pull(client, TOPIC, 0, offset=5)["messages"] == []


def test_lookups_by_msg_id_key_and_commitlog_offset(client: FlaskClient) -> None:
    result = client.post(PRODUCE, json={"body": "find me", "keys": "order-9 x",
                                        "properties": {"UNIQ_KEY": "u-1"}}).get_json()
    by_id = client.get(f"/v1/messages/{result['msgId']}")
    assert by_id.status_code == 200
    assert by_id.get_json()["messages"][0]["body"] == "find me"
    for key in ("order-9", "u-1"):
        found = client.get("/v1/messages", query_string={"topic": TOPIC, "key": key})
        assert [m["body"] for m in found.get_json()["messages"]] == ["find me"]
    assert client.get("/v1/messages", query_string={"topic": TOPIC, "key": "zz"}).get_json() == \
        {"messages": []}
    full = client.get(f"/v1/commitlog/{result['commitLogOffset']}").get_json()
    assert full["body"] == "find me" and full["msgId"] == result["msgId"]
    headers_only = client.get(f"/v1/commitlog/{result['commitLogOffset']}?body=false").get_json()
    assert "body" not in headers_only and "bodyBase64" not in headers_only
    assert headers_only["keys"] == "order-9 x"
    assert_error(client.get(f"/v1/commitlog/{result['commitLogOffset'] + 1}"), 404,
                 "MESSAGE_NOT_FOUND")
    assert_error(client.get("/v1/messages/7F00000100001F9100000000FFFFFFFF"), 404,
                 "MESSAGE_NOT_FOUND")


def test_group_offsets(client: FlaskClient) -> None:
    assert client.get("/v1/groups/G1/offsets").get_json() == {"group": "G1", "offsets": {}}
    client.post(BATCH, json={"messages": [{"body": "x", "queueId": 1}] * 3})
    resp = client.put("/v1/groups/G1/offsets", json={"topic": TOPIC, "queueId": 1, "offset": 2})
    assert resp.status_code == 200
    assert resp.get_json() == {"group": "G1", "topic": TOPIC, "queueId": 1, "offset": 2}
    assert client.get("/v1/groups/G1/offsets").get_json() == \
        {"group": "G1", "offsets": {TOPIC: {"1": 2}}}
    assert client.get(f"/v1/groups/G1/offsets?topic={TOPIC}").get_json()["offsets"] == \
        {TOPIC: {"1": 2}}
    assert client.get("/v1/groups/G1/offsets?topic=other").get_json()["offsets"] == {}


def test_heartbeats_report_consumers_and_mismatches(client: FlaskClient) -> None:
    # SPEC C1, C5
    hb = "/v1/groups/G/heartbeat"
    first = client.post(hb, json={"clientId": "c2", "subscriptions": {TOPIC: "*"}})
    assert first.get_json() == {"consumers": ["c2"], "consistent": True, "mismatches": []}
    client.post(hb, json={"clientId": "c1", "subscriptions": {TOPIC: "*"},
                          "messageModel": "CLUSTERING"})
    odd = client.post(hb, json={"clientId": "c3", "subscriptions": {TOPIC: "a || b"}}).get_json()
    assert odd["consumers"] == ["c1", "c2", "c3"]
    assert odd["consistent"] is False
    [mismatch] = odd["mismatches"]
    assert mismatch["clientId"] == "c3" and "SPEC C5" in mismatch["message"]
    listed = client.get("/v1/groups/G/consumers").get_json()
    assert [c["clientId"] for c in listed["consumers"]] == ["c1", "c2", "c3"]
    assert listed["consumers"][0]["subscriptions"] == {TOPIC: "*"}
    assert listed["consumers"][0]["messageModel"] == "CLUSTERING"
    assert isinstance(listed["consumers"][0]["lastHeartbeatMs"], int)
    assert listed["consistent"] is False
    assert client.delete("/v1/groups/G/consumers/c3").get_json() == {"removed": True}
    assert client.delete("/v1/groups/G/consumers/c3").get_json() == {"removed": False}
    assert client.get("/v1/groups/G/consumers").get_json()["consistent"] is True


def test_consumers_expire_without_heartbeats(client: FlaskClient, app: Flask) -> None:
    now = [1_000_000]
    context(app).consumers = ConsumerRegistry(30_000, clock_ms=lambda: now[0])
    client.post("/v1/groups/G/heartbeat", json={"clientId": "old", "subscriptions": {TOPIC: "*"}})
    now[0] += 20_000
    client.post("/v1/groups/G/heartbeat", json={"clientId": "new", "subscriptions": {TOPIC: "*"}})
    now[0] += 10_001
    listed = client.get("/v1/groups/G/consumers").get_json()
    assert [c["clientId"] for c in listed["consumers"]] == ["new"]
    now[0] += 30_001
    assert client.get("/v1/groups/G/consumers").get_json()["consumers"] == []


def test_delayed_message_is_parked_then_handed_over(client: FlaskClient) -> None:
    # SPEC S1, S2, L3, D4: level 1 of "1s 2s 3s"
    put = client.post(PRODUCE, json={"body": "later", "delayLevel": 1, "queueId": 1}).get_json()
    assert (put["topic"], put["queueId"]) == ("SCHEDULE_TOPIC_XXXX", 0)
    levels = client.get("/v1/schedule/levels").get_json()["levels"]
    assert [(lv["level"], lv["delayMs"], lv["queueId"]) for lv in levels] == \
        [(1, 1000, 0), (2, 2000, 1), (3, 3000, 2)]
    assert (levels[0]["maxOffset"], levels[0]["handedOver"]) == (1, -1)
    entries = client.get("/v1/schedule/levels/1/entries?offset=0&max=10").get_json()
    [deliver_ts] = entries["deliverTs"]
    assert deliver_ts == put["storeTimestamp"] + 1000
    early = client.post("/v1/schedule/levels/1/handover", json={"fromOffset": 0}).get_json()
    if early["delivered"] == 0:
        assert early["notDue"] is True and early["nextDeliverTs"] == deliver_ts
    wait_until(lambda: time.time() * 1000 > deliver_ts, 10, what="deliver time")
    done = client.post("/v1/schedule/levels/1/handover",
                       json={"fromOffset": 0, "max": 10}).get_json()
    assert early["delivered"] + done["delivered"] == 1
    assert done["nextOffset"] == 1 and done["handedOver"] == 0
    [msg] = pull(client, TOPIC, 1)["messages"]
    assert msg["body"] == "later" and "DELAY" not in msg["properties"]
    replay = client.post("/v1/schedule/levels/1/handover", json={"fromOffset": 0}).get_json()
    assert replay["delivered"] == 0  # D9: never twice
    assert len(pull(client, TOPIC, 1)["messages"]) == 1
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'clepsydra_store_schedule_delivered_total{level="1"} 1.0' in metrics
    assert 'clepsydra_store_schedule_lateness_ms_count{level="1"} 1.0' in metrics  # D10


def test_retry_topic_path_is_percent_decoded(client: FlaskClient) -> None:
    # DESIGN: `%RETRY%G` travels as `%25RETRY%25G`; a plain send auto-creates it (R9)
    put = client.post("/v1/topics/%25RETRY%25G/messages", json={"body": "again"})
    assert put.status_code == 201, put.get_json()
    assert put.get_json()["topic"] == "%RETRY%G"
    assert client.get("/v1/topics/%25RETRY%25G").get_json()["name"] == "%RETRY%G"
    assert pull(client, "%25RETRY%25G")["messages"][0]["body"] == "again"


def test_internal_topics_and_copy(client: FlaskClient) -> None:
    created = client.post("/v1/internal/topics", json={"name": "%RETRY%G2", "queues": 2})
    assert created.status_code == 201 and created.get_json()["system"] is True
    assert client.post("/v1/internal/topics",
                       json={"name": "%RETRY%G2", "queues": 2}).status_code == 200
    src = client.post(PRODUCE, json={"body": "orig", "tags": "t",
                                     "properties": {"keep": "1", "drop": "2"}}).get_json()
    resp = client.post("/v1/internal/copy", json={"items": [{
        "commitLogOffset": src["commitLogOffset"], "topic": "%RETRY%G2", "queueId": 1,
        "reconsumeTimes": 1, "setProperties": {"RETRY_TOPIC": TOPIC},
        "removeProperties": ["drop"]}]})
    assert resp.status_code == 201, resp.get_json()
    [result] = resp.get_json()["results"]
    assert (result["topic"], result["queueId"]) == ("%RETRY%G2", 1)
    [copied] = pull(client, "%25RETRY%25G2", 1)["messages"]
    assert copied["body"] == "orig" and copied["reconsumeTimes"] == 1
    assert copied["properties"]["RETRY_TOPIC"] == TOPIC
    assert "drop" not in copied["properties"] and copied["properties"]["keep"] == "1"
    before = stored_count(client)
    assert_error(client.post("/v1/internal/copy", json={"items": [
        {"commitLogOffset": src["commitLogOffset"] + 1, "topic": "%DLQ%G2"}]}), 404,
        "MESSAGE_NOT_FOUND")
    assert stored_count(client) == before


def test_internal_copy_range_sends_each_message_to_its_origin_or_a_topic(
        client: FlaskClient) -> None:
    # SPEC R16: "resend all" of a DLQ in one store call; skips say why; nothing half-written
    client.post("/v1/internal/topics", json={"name": "%DLQ%G3", "queues": 1})
    client.post("/v1/internal/topics", json={"name": "%RETRY%G3", "queues": 1})
    origins = [TOPIC, "", TOPIC, "nope", "%RETRY%G3"]
    for i, origin in enumerate(origins):
        props = {"RETRY_TOPIC": origin} if origin else {}
        put = client.post("/v1/internal/copy", json={"items": [{
            "commitLogOffset": client.post(PRODUCE, json={
                "body": f"d{i}", "properties": {"k": str(i)}}).get_json()["commitLogOffset"],
            "topic": "%DLQ%G3", "reconsumeTimes": 16, "setProperties": {
                **props, "DLQ_REASON": "max_reconsume_times"}}]})
        assert put.status_code == 201, put.get_json()
    source = pull(client, "%25DLQ%25G3", max=10)["messages"]
    before = {m["offsetMsgId"] for m in pull_all(client, TOPIC)}
    resp = client.post("/v1/internal/copy-range", json={
        "topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0, "max": 4, "target": "origin",
        "reconsumeTimes": 0, "removeProperties": ["DLQ_REASON"]})
    assert resp.status_code == 201, resp.get_json()
    r = resp.get_json()
    assert r["copied"] == 2  # each source copy named by its offsetMsgId
    assert r["copiedMsgIds"] == [source[0]["offsetMsgId"], source[2]["offsetMsgId"]]
    assert [(s["queueOffset"], s["msgId"]) for s in r["skipped"]] == [
        (1, source[1]["offsetMsgId"]), (3, source[3]["offsetMsgId"])]
    assert "no RETRY_TOPIC" in r["skipped"][0]["reason"]
    assert "does not exist" in r["skipped"][1]["reason"]
    assert r["nextOffset"] == 4 and r["lastCommitLogOffset"] == source[3]["commitLogOffset"]
    resent = [m for m in pull_all(client, TOPIC) if m["offsetMsgId"] not in before]
    assert sorted(m["body"] for m in resent) == ["d0", "d2"]
    assert all(m["reconsumeTimes"] == 0 and "DLQ_REASON" not in m["properties"]
               and m["properties"]["k"] in ("0", "2") for m in resent)
    system = client.post("/v1/internal/copy-range", json={
        "topic": "%DLQ%G3", "queueId": 0, "fromOffset": 4, "target": "origin"}).get_json()
    assert system["copied"] == 0 and "system topic" in system["skipped"][0]["reason"]
    into_retry = client.post("/v1/internal/copy-range", json={
        "topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0, "target": "%RETRY%G3",
        "delayLevel": 2}).get_json()
    assert into_retry["copied"] == 5 and into_retry["nextOffset"] == 5
    levels = client.get("/v1/schedule/levels").get_json()["levels"]
    assert next(lv for lv in levels if lv["level"] == 2)["maxOffset"] == 5  # parked (S1)
    count = stored_count(client)
    for body, code, status in (
            ({"topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0}, "INVALID_REQUEST", 400),
            ({"topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0, "target": "origin",
              "extra": 1}, "INVALID_REQUEST", 400),
            ({"topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0, "target": "origin",
              "max": 1001}, "INVALID_REQUEST", 400),
            ({"topic": "%DLQ%G3", "queueId": 0, "fromOffset": 99, "target": "origin"},
             "OFFSET_OUT_OF_RANGE", 404),  # a position the queue lacks
            ({"topic": "%DLQ%G3", "queueId": 3, "fromOffset": 0, "target": "origin"},
             "OFFSET_OUT_OF_RANGE", 404),
            ({"topic": "absent", "queueId": 0, "fromOffset": 0, "target": "origin"},
             "TOPIC_NOT_EXIST", 404),
            ({"topic": "SCHEDULE_TOPIC_XXXX", "queueId": 0, "fromOffset": 0,
              "target": "origin"}, "FORBIDDEN", 403),
            ({"topic": "%DLQ%G3", "queueId": 0, "fromOffset": 0, "target": "bad name!"},
             "INVALID_TOPIC", 400)):
        resp = client.post("/v1/internal/copy-range", json=body)
        assert resp.status_code == status, (body, resp.get_json())
        assert resp.get_json()["error"] == code, (body, resp.get_json())
    assert stored_count(client) == count


def test_read_only_store_answers_no_permission(make_app: Callable[..., Flask]) -> None:
    c = make_app(CLEPSYDRA_STORE_WRITABLE="false").test_client()
    assert c.get("/healthz").get_json() == {"status": "ok", "writable": False}
    assert_error(c.post("/v1/topics", json={"name": "t", "queues": 1}), 403, "NO_PERMISSION",
                 "R2")
    for path, body in [(PRODUCE, {"body": "a"}), (BATCH, {"messages": [{"body": "a"}]}),
                       ("/v1/internal/topics", {"name": "%RETRY%G", "queues": 1}),
                       ("/v1/internal/copy", {"items": [{"commitLogOffset": 0, "topic": "t"}]}),
                       ("/v1/internal/copy-range", {"topic": "t", "queueId": 0,
                                                    "fromOffset": 0, "target": "origin"}),
                       ("/v1/schedule/levels/1/handover", {"fromOffset": 0})]:
        assert_error(c.post(path, json=body), 403, "NO_PERMISSION", "R2")
    assert stored_count(c) == 0


def test_healthz_and_metrics(client: FlaskClient) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok", "writable": True}
    client.post(PRODUCE, json={"body": "x" * 10})
    client.post(PRODUCE, json={"body": "a", "delayLevel": 2})
    text = client.get("/metrics").get_data(as_text=True)
    assert 'clepsydra_store_requests_total{operation="produce",status="201"}' in text
    assert "clepsydra_store_produced_messages_total 2.0" in text
    assert 'clepsydra_store_schedule_backlog{level="2"} 1.0' in text
    assert "clepsydra_store_request_seconds_bucket" in text
    assert "clepsydra_store_engine_" in text


def test_openapi_lists_every_route(app: Flask) -> None:
    """The document is true to the app: the same paths and methods, no more, no less."""
    doc = app.test_client().get("/openapi.json").get_json()
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    registered = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda m: "{" + _camel(m.group(1)) + "}",
                      rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                registered.add((path, method))
    assert documented == registered
    served = app.test_client().get("/openapi.json")
    assert served.status_code == 200 and served.get_json()["openapi"].startswith("3.")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
