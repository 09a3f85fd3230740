"""Send-back through the real retry service and store (SPEC R1-R8, R10, O1, O2)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
import redis
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.retry import SendBackAnswer, SendBackResults
from clepsydra_retry.app import create_app
from clepsydra_retry.settings import RetrySettings
from tools.processes import HttpService, RedisServer, free_port

if TYPE_CHECKING:
    from tests.integration.retry.conftest import RetryStack

pytestmark = pytest.mark.integration

LEVELS_1S = " ".join(["1s"] * 18)


def enc(topic: str) -> str:
    return quote(topic, safe="")

Names = Callable[[str], str]


@pytest.fixture
def setup(stack: RetryStack, names: Names) -> tuple[str, str]:
    """(group, topic): a fresh group with default settings and a fresh 2-queue topic."""
    group, topic = names("G"), names("T")
    assert stack.put_group(group).status_code == 201
    stack.create_topic(topic, 2)
    return group, topic


def test_first_send_back_parks_a_copy_for_the_retry_topic(stack: RetryStack,
                                                           setup: tuple[str, str]) -> None:
    # SPEC R1, R3, R4, R7, R8
    group, topic = setup
    sent = stack.produce(topic, "payload", tags="TagA", keys="k1 k2",
                         properties={"app": "kept"})
    original = stack.message(sent["commitLogOffset"])
    result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"])
    assert result["outcome"] == "RETRY"
    assert result["topic"] == naming.retry_topic(group)
    assert result["delayLevel"] == 3  # SPEC R7: 3 + reconsumeTimes 0

    retry_topic = stack.topic(naming.retry_topic(group))  # SPEC R3: created on first use
    assert retry_topic is not None and len(retry_topic["queues"]) == 1

    copy = stack.by_msg_id(result["msgId"])
    assert copy["topic"] == naming.SCHEDULE_TOPIC  # delayed (S1)
    props = copy["properties"]
    assert props[P.REAL_TOPIC] == naming.retry_topic(group) and props[P.DELAY] == "3"
    assert props[P.RETRY_TOPIC] == topic  # SPEC R4
    assert props[P.ORIGIN_MESSAGE_ID] == sent["msgId"]  # SPEC R8
    assert props[P.MAX_RECONSUME_TIMES] == "16"  # SPEC R5 default
    assert props["app"] == "kept" and copy["tags"] == "TagA" and copy["keys"] == "k1 k2"
    assert copy["body"] == "payload" and copy["reconsumeTimes"] == 1  # SPEC R8
    for kept in ("bornTimestamp", "bornHost", "flag", "sysFlag"):
        assert copy[kept] == original[kept], kept


def test_send_back_by_msg_id(stack: RetryStack, setup: tuple[str, str]) -> None:  # SPEC R1
    group, topic = setup
    sent = stack.produce(topic)
    result = stack.ok_send_back(group, msgId=sent["msgId"], delayLevel=2)
    assert (result["outcome"], result["delayLevel"]) == ("RETRY", 2)
    assert stack.by_msg_id(result["msgId"])["properties"][P.DELAY] == "2"
    # the msgId names every copy; by itself it means the copy the group consumed
    # (not the parked retry copy), and an offsetMsgId names one copy exactly
    assert result["msgId"] == sent["msgId"]
    again = stack.ok_send_back(group, msgId=sent["msgId"], delayLevel=1)
    parked = stack.copies(sent["msgId"])
    assert [c["topic"] for c in parked] == [topic, naming.SCHEDULE_TOPIC, naming.SCHEDULE_TOPIC]
    assert json.loads(parked[-1]["properties"][P.FAILURE_HISTORY])[-1]["reconsumeTimes"] == 0
    assert again["msgId"] == sent["msgId"]
    by_offset = stack.ok_send_back(group, msgId=sent["offsetMsgId"], delayLevel=1)
    assert by_offset["msgId"] == sent["msgId"]


def test_retry_topic_gets_the_groups_queue_count(stack: RetryStack, names: Names) -> None:
    # SPEC R3: retryQueueNums queues, queueId chosen at random among them
    group, topic = names("G"), names("T")
    stack.put_group(group, retryQueueNums=3)
    stack.create_topic(topic)
    queue_ids = set()
    for _ in range(24):
        sent = stack.produce(topic)
        result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"])
        queue_ids.add(int(stack.by_msg_id(result["msgId"])["properties"][P.REAL_QID]))
    info = stack.topic(naming.retry_topic(group))
    assert info is not None and len(info["queues"]) == 3
    assert queue_ids == {0, 1, 2}


def test_unknown_group_is_refused_first_when_groups_are_not_auto_created(
        stack: RetryStack, names: Names) -> None:  # SPEC R2 (1)
    settings = RetrySettings.for_test(stack.store.url, stack.redis.url,
                                      CLEPSYDRA_AUTO_CREATE_GROUPS="false")
    app = create_app(settings)
    try:
        resp = app.test_client().post(f"/v1/groups/{names('nogroup')}/send-back",
                                      json={"commitLogOffset": 10**12})
        assert resp.status_code == 404
        assert resp.get_json()["error"] == "SUBSCRIPTION_GROUP_NOT_EXIST"
    finally:
        app.extensions["clepsydra_retry"].store.close()
        app.extensions["clepsydra_retry"].redis.close()


def test_a_group_is_created_with_defaults_on_its_first_send_back(
        stack: RetryStack, names: Names) -> None:
    # as RocketMQ's broker does; the SDK no longer falls back for a new group
    group, topic = names("newgroup"), names("T")
    stack.create_topic(topic)
    sent = stack.produce(topic, "first failure")
    assert stack.http.get(f"{stack.retry.url}/v1/groups/{group}").status_code == 404
    result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"])
    assert (result["outcome"], result["delayLevel"]) == ("RETRY", 3)
    settings = stack.http.get(f"{stack.retry.url}/v1/groups/{group}").json()
    assert (settings["retryQueueNums"], settings["retryMaxTimes"]) == (1, 16)
    in_store = stack.http.get(f"{stack.store.url}/v1/groups/{group}/settings")
    assert in_store.status_code == 200  # kept durably by the store


def test_zero_retry_queues_drops_and_writes_nothing(stack: RetryStack, names: Names) -> None:
    # SPEC R2 (3): success, nothing written -- checked before the message (a bogus offset too)
    group, topic = names("G"), names("T")
    assert stack.put_group(group, retryQueueNums=0).json()["retryQueueNums"] == 0
    stack.create_topic(topic)
    sent = stack.produce(topic)
    before = stack.written(group, topic)
    for offset in (sent["commitLogOffset"], 10**12):
        resp = stack.send_back(group, commitLogOffset=offset)
        assert resp.status_code == 200
        assert resp.json() == {"outcome": "DROPPED", "topic": None, "delayLevel": None,
                               "msgId": None}
    assert stack.written(group, topic) == before
    assert stack.topic(naming.retry_topic(group)) is None


def test_unknown_offset_and_msg_id_are_named(stack: RetryStack, setup: tuple[str, str]) -> None:
    # SPEC R2 (5): SYSTEM_ERROR naming the offset; DESIGN: an unknown message is a 404
    group, topic = setup
    before = stack.written(group, topic)
    resp = stack.send_back(group, commitLogOffset=987654321)
    assert resp.status_code == 404
    assert resp.json()["error"] == "SYSTEM_ERROR" and "987654321" in resp.json()["message"]
    missing = "7F00000100001F9100000000075BCD15"
    resp = stack.send_back(group, msgId=missing)
    assert resp.status_code == 404 and missing in resp.json()["message"]
    # an offset inside a record is not a message either
    sent = stack.produce(topic)
    resp = stack.send_back(group, commitLogOffset=sent["commitLogOffset"] + 3)
    assert resp.status_code == 404 and str(sent["commitLogOffset"] + 3) in resp.json()["message"]
    assert stack.written(group, topic) == before + 1  # only the produce above


@pytest.fixture
def read_only(tmp_path: Path, redis_server: RedisServer,
              start_store: Callable[..., HttpService]) -> Iterator[tuple[FlaskClient, str]]:
    store = start_store(env={"CLEPSYDRA_STORE_WRITABLE": "false",
                             "CLEPSYDRA_DELAY_LEVELS": LEVELS_1S})
    settings = RetrySettings.for_test(store.url, redis_server.url,
                                      CLEPSYDRA_DELAY_LEVELS=LEVELS_1S)
    app = create_app(settings)
    yield app.test_client(), store.url
    app.extensions["clepsydra_retry"].store.close()
    app.extensions["clepsydra_retry"].redis.close()


def test_store_not_writable_is_no_permission(read_only: tuple[FlaskClient, str]) -> None:
    # SPEC R2 (2): after the group check, before the drop check and the message check
    client, _ = read_only
    client.put("/v1/groups/ro", json={})
    client.put("/v1/groups/ro0", json={"retryQueueNums": 0})
    for group in ("ro", "ro0"):
        resp = client.post(f"/v1/groups/{group}/send-back", json={"commitLogOffset": 12345})
        assert resp.status_code == 403, resp.get_json()
        assert resp.get_json()["error"] == "NO_PERMISSION"
    resp = client.post("/v1/groups/absent/send-back", json={"commitLogOffset": 0})
    assert resp.get_json()["error"] == "NO_PERMISSION"  # created on first use (12.2), then R2 (2)
    resp = client.post("/v1/groups/ro/dlq/resend", json={"all": True})
    assert resp.status_code == 403 and resp.get_json()["error"] == "NO_PERMISSION"


def test_max_reconsume_times_from_request_else_group(stack: RetryStack, names: Names) -> None:
    # SPEC R5, R6: reconsumeTimes >= max -> DLQ; the request's max wins over the group's
    group, topic = names("G"), names("T")
    stack.put_group(group, retryMaxTimes=2)
    stack.create_topic(topic)
    # a message that has been consumed twice already (an R9 fallback send carries the count)
    twice = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: "2", P.RETRY_TOPIC: topic, P.MAX_RECONSUME_TIMES: "16"})
    assert twice["topic"] == naming.retry_topic(group)
    dead = stack.ok_send_back(group, commitLogOffset=twice["commitLogOffset"])
    assert dead["outcome"] == "DLQ" and dead["topic"] == naming.dlq_topic(group)
    assert stack.by_msg_id(dead["msgId"])["properties"][P.DLQ_REASON] == "max_reconsume_times"
    again = stack.ok_send_back(group, commitLogOffset=twice["commitLogOffset"],
                               maxReconsumeTimes=5)
    assert (again["outcome"], again["delayLevel"]) == ("RETRY", 5)  # 3 + 2
    assert stack.by_msg_id(again["msgId"])["properties"][P.MAX_RECONSUME_TIMES] == "5"
    # SPEC R5: -1 is RocketMQ's "the default" (the group's 2 here), not "dead-letter now"
    default = stack.ok_send_back(group, commitLogOffset=twice["commitLogOffset"],
                                 maxReconsumeTimes=-1)
    assert default["outcome"] == "DLQ"
    once = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: "1", P.RETRY_TOPIC: topic})
    kept = stack.ok_send_back(group, commitLogOffset=once["commitLogOffset"],
                              maxReconsumeTimes=-1)
    assert kept["outcome"] == "RETRY"


def test_negative_level_goes_to_the_dlq_at_once(stack: RetryStack, setup: tuple[str, str]) -> None:
    # SPEC R6: %DLQ%<group>, one queue, queueId 0, not delayed
    group, topic = setup
    sent = stack.produce(topic, "to the dlq", properties={"app": "x"})
    result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"], delayLevel=-1,
                                reason="ValueError: nope", consumerId="c-1")
    assert result == {"outcome": "DLQ", "topic": naming.dlq_topic(group), "delayLevel": 0,
                      "msgId": result["msgId"]}
    dead = stack.by_msg_id(result["msgId"])
    assert dead["topic"] == naming.dlq_topic(group) and dead["queueId"] == 0
    assert P.DELAY not in dead["properties"]
    assert dead["properties"][P.DLQ_REASON] == "level_negative"
    assert dead["properties"][P.RETRY_TOPIC] == topic and dead["body"] == "to the dlq"
    assert dead["reconsumeTimes"] == 1
    info = stack.topic(naming.dlq_topic(group))
    assert info is not None and len(info["queues"]) == 1
    history = json.loads(dead["properties"][P.FAILURE_HISTORY])
    assert history[0]["reason"] == "ValueError: nope" and history[0]["consumer"] == "c-1"
    # SPEC R6: any level below 0 dead-letters (RocketMQ's rule), -2 was a 400
    other = stack.produce(topic, "also to the dlq")
    minus_two = stack.ok_send_back(group, commitLogOffset=other["commitLogOffset"],
                                   delayLevel=-2)
    assert minus_two["outcome"] == "DLQ"


@pytest.mark.parametrize(("asked", "reconsumed", "used"), [(0, 5, 8), (0, 15, 18), (7, 3, 7),
                                                            (40, 0, 18)])
def test_levels_chosen_by_r7(stack: RetryStack, setup: tuple[str, str], asked: int, reconsumed: int,
                             used: int) -> None:  # SPEC R7, L2
    group, topic = setup
    sent = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: str(reconsumed), P.RETRY_TOPIC: topic})
    result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"], delayLevel=asked)
    assert result["delayLevel"] == used
    copy = stack.by_msg_id(result["msgId"])
    assert copy["properties"][P.DELAY] == str(used)
    assert copy["reconsumeTimes"] == reconsumed + 1


def test_origin_fields_are_kept_across_send_backs(stack: RetryStack,
                                                  setup: tuple[str, str]) -> None:
    # SPEC R4, R8: RETRY_TOPIC and ORIGIN_MESSAGE_ID come from the first retry only
    group, topic = setup
    sent = stack.produce(topic)
    first = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"], delayLevel=1)
    copy = stack.by_msg_id(first["msgId"])
    second = stack.ok_send_back(group, commitLogOffset=copy["commitLogOffset"], delayLevel=1)
    again = stack.by_msg_id(second["msgId"])
    assert again["properties"][P.ORIGIN_MESSAGE_ID] == sent["msgId"]
    assert again["properties"][P.RETRY_TOPIC] == topic
    assert again["reconsumeTimes"] == 2


def test_plain_send_at_max_goes_to_the_dlq(stack: RetryStack, names: Names) -> None:
    # SPEC R10 (the store's rule), seen through the store and the DLQ toolkit
    group, topic = names("G"), names("T")
    stack.put_group(group)
    below = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: "2", P.MAX_RECONSUME_TIMES: "3", P.RETRY_TOPIC: topic})
    assert below["topic"] == naming.retry_topic(group)
    at_max = stack.produce(naming.retry_topic(group), "orderly", properties={
        P.RECONSUME_TIME: "3", P.MAX_RECONSUME_TIMES: "3", P.RETRY_TOPIC: topic})
    assert at_max["topic"] == naming.dlq_topic(group)
    default_max = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: "16", P.RETRY_TOPIC: topic})
    assert default_max["topic"] == naming.dlq_topic(group)
    # SPEC R5: a max of -1 is the default (16), not "dead-letter at once"
    minus_one = stack.produce(naming.retry_topic(group), properties={
        P.RECONSUME_TIME: "3", P.MAX_RECONSUME_TIMES: "-1", P.RETRY_TOPIC: topic})
    assert minus_one["topic"] == naming.retry_topic(group)
    assert stack.dlq_ids(group) == [at_max["msgId"], default_max["msgId"]]


def test_batch_send_back_answers_each_item(stack: RetryStack, setup: tuple[str, str]) -> None:
    group, topic = setup
    a, b = stack.produce(topic), stack.produce(topic)
    resp = stack.http.post(f"{stack.retry.url}/v1/groups/{group}/send-back/batch", json={
        "items": [{"commitLogOffset": a["commitLogOffset"]},
                  {"commitLogOffset": 10**12}, {"msgId": b["msgId"], "delayLevel": -1},
                  {"delayLevel": "x"}]})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert results[0]["outcome"] == "RETRY" and results[2]["outcome"] == "DLQ"
    assert results[1]["error"] == "SYSTEM_ERROR" and str(10**12) in results[1]["message"]
    assert results[3]["error"] == "INVALID_REQUEST"


def test_batch_body_and_answer_are_the_wire_types(stack: RetryStack,
                                                 setup: tuple[str, str]) -> None:
    # the batch is read as SendBackItems (each item on its own) and answered as
    # SendBackResults; a body that is not one is a 400 naming the field, nothing sent back
    group, topic = setup
    sent = stack.produce(topic)
    url = f"{stack.retry.url}/v1/groups/{group}/send-back/batch"
    resp = stack.http.post(url, json={"items": [{"commitLogOffset": sent["commitLogOffset"]},
                                                {"delayLevel": "x"}]})
    assert resp.status_code == 200, resp.text
    ok, refused = SendBackResults.from_json(resp.json()).results
    assert isinstance(ok, SendBackAnswer) and ok.msg_id == sent["msgId"]
    assert isinstance(refused, ErrorAnswer) and "delayLevel" in refused.message
    copies = len(stack.copies(sent["msgId"]))
    for body, words in [({"items": []}, "send-back batch.items must hold 1 to 1000 items"),
                        ([{"commitLogOffset": 1}], "send-back batch must be an object"),
                        ({"items": [{"commitLogOffset": sent["commitLogOffset"]}], "x": 1},
                         "send-back batch: unknown field 'x'")]:
        resp = stack.http.post(url, json=body)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"] == "INVALID_REQUEST" and words in resp.json()["message"]
    assert len(stack.copies(sent["msgId"])) == copies  # no partial write


def test_batch_with_pull_hints_reads_the_store_not_the_client(stack: RetryStack,
                                                               setup: tuple[str, str]) -> None:
    # SPEC R2 (5), R8: a hint (where the message was pulled) saves reads, never replaces them
    group, topic = setup
    sent = [stack.produce(topic, f"h{n}", queueId=0) for n in range(5)]
    items: list[dict[str, object]] = [
        {"commitLogOffset": m["commitLogOffset"], "topic": topic, "queueId": 0,
         "queueOffset": m["queueOffset"], "reason": f"r{n}"} for n, m in enumerate(sent)]
    items[1]["queueOffset"] = sent[3]["queueOffset"]  # a wrong hint: falls back to a read
    items.append({"commitLogOffset": 10**12, "topic": topic, "queueId": 0, "queueOffset": 0})
    items.append({"commitLogOffset": sent[0]["commitLogOffset"], "topic": "NoSuchTopic",
                  "queueId": 9, "queueOffset": 0})
    resp = stack.http.post(f"{stack.retry.url}/v1/groups/{group}/send-back/batch",
                           json={"items": items})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [r.get("outcome") for r in results] == ["RETRY"] * 5 + [None, "RETRY"]
    assert results[5]["error"] == "SYSTEM_ERROR" and str(10**12) in results[5]["message"]
    for n, result in enumerate(results[:5]):
        assert result["msgId"] == sent[n]["msgId"]  # the message keeps its id
        [copy] = [c for c in stack.copies(result["msgId"])
                  if P.FAILURE_HISTORY in c["properties"] and json.loads(
                      c["properties"][P.FAILURE_HISTORY])[0]["reason"] == f"r{n}"]
        assert copy["body"] == f"h{n}" and copy["properties"][P.ORIGIN_MESSAGE_ID] == \
            sent[n]["msgId"]


def send_back_spans(stack: RetryStack, msg_id: str) -> list[dict[str, Any]]:
    return [s for s in stack.spans() if s["name"] == "retry.send_back"
            and s["attributes"].get(telemetry.MESSAGE_ID) == msg_id]


def test_send_back_span_continues_the_messages_trace(stack: RetryStack,
                                                     setup: tuple[str, str]) -> None:
    # SPEC O1: a span per send-back; without a caller's context, a child of the message's
    group, topic = setup
    sent = stack.produce(topic)
    traceparent = stack.message(sent["commitLogOffset"])["properties"][P.TRACEPARENT]
    trace_id = traceparent.split("-")[1]
    result = stack.ok_send_back(group, commitLogOffset=sent["commitLogOffset"])
    copy = stack.by_msg_id(result["msgId"])
    assert copy["properties"][P.TRACEPARENT].split("-")[1] == trace_id
    spans = send_back_spans(stack, sent["msgId"])
    assert len(spans) == 1
    span = spans[0]
    assert span["service"] == telemetry.RETRY_SERVICE and span["traceId"] == trace_id
    assert span["parentSpanId"] == traceparent.split("-")[2]
    assert span["links"] == []  # the same trace: nothing to link
    assert copy["properties"][P.TRACEPARENT].split("-")[2] == span["spanId"]


def test_send_back_span_is_a_child_of_the_failed_attempt(stack: RetryStack,
                                                         setup: tuple[str, str]) -> None:
    # SPEC O1: the caller's traceparent (header, or a batch item's own) is the parent; the
    # message's trace, when another one, is linked
    group, topic = setup
    sent = stack.produce(topic)
    message_trace = stack.message(sent["commitLogOffset"])["properties"][P.TRACEPARENT]
    header_attempt = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    resp = stack.http.post(f"{stack.retry.url}/v1/groups/{group}/send-back",
                           json={"commitLogOffset": sent["commitLogOffset"]},
                           headers={"traceparent": header_attempt})
    assert resp.status_code == 200, resp.text
    item_attempt = "00-" + "3" * 32 + "-" + "4" * 16 + "-01"
    resp = stack.http.post(f"{stack.retry.url}/v1/groups/{group}/send-back/batch",
                           json={"items": [{"commitLogOffset": sent["commitLogOffset"],
                                            P.TRACEPARENT: item_attempt}]},
                           headers={"traceparent": header_attempt})
    assert resp.status_code == 200, resp.text
    spans = send_back_spans(stack, sent["msgId"])
    assert [(s["traceId"], s["parentSpanId"]) for s in spans] == [
        ("1" * 32, "2" * 16), ("3" * 32, "4" * 16)]
    assert all(s["links"] == [message_trace.split("-")[1]] for s in spans)


def test_group_settings_api(stack: RetryStack, names: Names) -> None:  # SPEC R2, R3, R5
    group = names("G")
    base = f"{stack.retry.url}/v1/groups/{group}"
    assert stack.http.get(base).status_code == 404
    assert stack.http.get(base).json()["error"] == "SUBSCRIPTION_GROUP_NOT_EXIST"
    created = stack.put_group(group)
    assert created.status_code == 201
    assert created.json() == {"group": group, "retryQueueNums": 1, "retryMaxTimes": 16}
    assert stack.put_group(group, retryMaxTimes=3).status_code == 200
    for bad in ({"retryQueueNums": -1}, {"retryMaxTimes": -1}, {"retryQueueNums": 10_000},
                {"retryMaxTimes": 2**40}, {"retryQueueNums": "1"}, {"nope": 1}):
        resp = stack.http.put(base, json=bad)
        assert resp.status_code == 400, bad
        assert set(resp.json()) == {"error", "message"}
    assert stack.http.get(base).json() == {"group": group, "retryQueueNums": 1,
                                           "retryMaxTimes": 3}
    assert group in stack.http.get(f"{stack.retry.url}/v1/groups").json()["groups"]
    resp = stack.http.put(f"{stack.retry.url}/v1/groups/{enc('bad%name')}", json={})
    assert resp.status_code == 400


def test_malformed_send_backs_change_nothing(stack: RetryStack, app_client: FlaskClient,
                                             setup: tuple[str, str]) -> None:
    group, topic = setup
    sent = stack.produce(topic)
    before = stack.written(group, topic)
    url = f"/v1/groups/{group}/send-back"
    for raw, code in ((b"", "INVALID_JSON"), (b"{not json", "INVALID_JSON"),
                      (b"[]", "INVALID_REQUEST"), (b'"text"', "INVALID_REQUEST")):
        resp = app_client.post(url, data=raw, content_type="application/json")
        assert resp.status_code == 400 and resp.get_json()["error"] == code
    for body in ({}, {"commitLogOffset": -1}, {"commitLogOffset": "1"}, {"msgId": "x y"},
                 {"commitLogOffset": sent["commitLogOffset"], "delayLevel": -2**31 - 1},
                 {"commitLogOffset": sent["commitLogOffset"], "maxReconsumeTimes": -2},
                 {"commitLogOffset": sent["commitLogOffset"], "extra": True}):
        resp = app_client.post(url, json=body)
        assert resp.status_code == 400, body
        assert set(resp.get_json()) == {"error", "message"}
    for body in ({"msgId": "xyz"},  # no message has that id (R2 (5))
                 {"msgId": sent["msgId"], "commitLogOffset": sent["commitLogOffset"] + 1}):
        resp = app_client.post(url, json=body)
        assert resp.status_code == 404 and resp.get_json()["error"] == "SYSTEM_ERROR", body
    assert app_client.get("/v1/nothing").status_code == 404
    assert app_client.get(url).status_code == 405
    assert stack.written(group, topic) == before


def test_metrics_count_send_backs_and_dlq_depth(stack: RetryStack, setup: tuple[str, str],
                                                app_client: FlaskClient) -> None:  # SPEC O2
    group, topic = setup
    for level in (0, -1, -1):
        stack.ok_send_back(group, commitLogOffset=stack.produce(topic)["commitLogOffset"],
                           delayLevel=level)
    text = stack.http.get(f"{stack.retry.url}/metrics").text
    assert f'clepsydra_retry_send_backs_total{{group="{group}",outcome="RETRY"}} 1.0' in text
    assert f'clepsydra_retry_send_backs_total{{group="{group}",outcome="DLQ"}} 2.0' in text
    assert f'clepsydra_retry_dlq_depth{{group="{group}"}} 2.0' in text
    client = redis.Redis.from_url(stack.redis.url, decode_responses=True)
    assert client.hgetall(naming.sendback_stats_key(group)) == {"RETRY": "1", "DLQ": "2"}
    health = stack.http.get(f"{stack.retry.url}/healthz").json()
    assert health["status"] == "ok" and health["store"] is True
    assert app_client.get("/openapi.json").get_json()["openapi"].startswith("3.")
    assert enc("%DLQ%x") == "%25DLQ%25x"


def test_dependencies_down_answer_503(stack: RetryStack) -> None:
    # The store not answering is SERVICE_UNAVAILABLE, never a 500 or a hang. Redis not
    # answering costs the health check and the counters only: group settings are durable in
    # the store and Redis is their cache
    dead_port = free_port()
    no_redis = create_app(RetrySettings.for_test(stack.store.url,
                                                 f"redis://127.0.0.1:{dead_port}/0"))
    client = no_redis.test_client()
    assert client.put("/v1/groups/g", json={"retryMaxTimes": 4}).status_code == 201
    assert client.get("/v1/groups/g").get_json()["retryMaxTimes"] == 4
    assert client.get("/healthz").status_code == 503
    no_redis.extensions["clepsydra_retry"].store.close()
    no_store = create_app(RetrySettings.for_test(f"http://127.0.0.1:{dead_port}",
                                                 stack.redis.url))
    client = no_store.test_client()
    for resp in (client.put("/v1/groups/store-down", json={}),
                 client.post("/v1/groups/store-down/send-back", json={"commitLogOffset": 0})):
        assert resp.status_code == 503 and resp.get_json()["error"] == "SERVICE_UNAVAILABLE"
        assert str(dead_port) in resp.get_json()["message"]
    no_store.extensions["clepsydra_retry"].redis.close()


def test_bad_setting_stops_start_up_naming_it() -> None:  # STYLE: fail fast at start-up
    for env, name in (({"CLEPSYDRA_RETRY_PORT": "abc"}, "CLEPSYDRA_RETRY_PORT"),
                      ({"CLEPSYDRA_DELAY_LEVELS": "1s 5x"}, "CLEPSYDRA_DELAY_LEVELS")):
        done = subprocess.run([sys.executable, "-m", "clepsydra_retry"], env={**env},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and name in done.stderr, done.stderr
