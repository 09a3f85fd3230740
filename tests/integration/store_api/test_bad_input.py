"""Bad input: each a 4xx JSON error naming the rule, nothing stored, the
service still up. Produce cases run twice: through the WSGI fast path and through Flask."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.integration.store_api.helpers import TOPIC, assert_error, stored_count

pytestmark = pytest.mark.integration

PRODUCE = f"/v1/topics/{TOPIC}/messages"
BATCH = f"/v1/topics/{TOPIC}/messages/batch"


@pytest.fixture
def before(client: FlaskClient) -> int:
    """One message stored before the bad request, so 'nothing stored' is a real check."""
    assert client.post(PRODUCE, json={"body": "ok"}).status_code == 201
    return stored_count(client)


def still_up(client: FlaskClient, before: int) -> None:
    assert stored_count(client) == before
    assert client.get("/healthz").get_json() == {"status": "ok", "writable": True}
    assert client.post(PRODUCE, json={"body": "after"}).status_code == 201


@pytest.mark.parametrize("topic", ["bad@name", "has space", "x" * 128, "50%off"])
def test_invalid_topic_name_is_refused(client: FlaskClient, before: int, topic: str) -> None:
    # SPEC P1
    assert_error(client.post(f"/v1/topics/{topic}/messages", json={"body": "a"}), 400,
                 "INVALID_TOPIC", "P1")
    assert_error(client.post("/v1/topics", json={"name": topic, "queues": 1}), 400,
                 "INVALID_TOPIC", "P1")
    still_up(client, before)


def test_pull_of_unknown_topic_is_404(client: FlaskClient, before: int) -> None:
    assert_error(client.get("/v1/topics/nosuch/queues/0/messages"), 404, "TOPIC_NOT_EXIST")
    assert_error(client.get("/v1/topics/nosuch"), 404, "TOPIC_NOT_EXIST")
    assert_error(client.post("/v1/topics/nosuch/messages", json={"body": "a"}), 404,
                 "TOPIC_NOT_EXIST")
    still_up(client, before)


def test_body_over_4_mib_is_413_body_too_large(client: FlaskClient, before: int) -> None:
    # SPEC P1, DEC-too-large-413: text and base64 bodies alike, single and batch, on the
    # Flask view and the lean WSGI path (the fixture runs both): 413 BODY_TOO_LARGE
    big = 4 * 1024 * 1024 + 1
    assert_error(client.post(PRODUCE, json={"body": "x" * big}), 413, "BODY_TOO_LARGE", "P1")
    encoded = base64.b64encode(b"\0" * big).decode()
    assert_error(client.post(PRODUCE, json={"bodyBase64": encoded}), 413, "BODY_TOO_LARGE",
                 "P1")
    body = assert_error(client.post(BATCH, json={"messages": [{"body": "ok"},
                                                              {"body": "x" * big}]}),
                        413, "BODY_TOO_LARGE", "P1")
    assert "messages[1]" in body["message"], body  # the batch refused whole, naming the message
    still_up(client, before)


def test_body_of_exactly_4_mib_is_stored(client: FlaskClient) -> None:
    resp = client.post(PRODUCE, json={"body": "x" * (4 * 1024 * 1024)})
    assert resp.status_code == 201, resp.get_json()


@pytest.mark.parametrize("fast_path", ["true", "false"])
def test_request_over_the_size_limit_is_413_body_too_large(make_app: Callable[..., Flask],
                                                           fast_path: str) -> None:
    # SPEC P1, DEC-too-large-413: the request limit answers as the message-body limit does
    app = make_app(CLEPSYDRA_STORE_MAX_REQUEST_BYTES="2048", CLEPSYDRA_STORE_FAST_PATH=fast_path)
    c = app.test_client()
    c.post("/v1/topics", json={"name": TOPIC, "queues": 1})
    before = stored_count(c)
    body = assert_error(c.post(PRODUCE, json={"body": "x" * 4096}), 413, "BODY_TOO_LARGE", "P1")
    assert "CLEPSYDRA_STORE_MAX_REQUEST_BYTES" in body["message"], body
    assert_error(c.post(BATCH, json={"messages": [{"body": "x" * 4096}]}), 413,
                 "BODY_TOO_LARGE", "P1")
    assert_error(c.post("/v1/topics", data=b"{" + b" " * 4096 + b"}"), 413, "BODY_TOO_LARGE")
    assert stored_count(c) == before


@pytest.mark.parametrize("fast_path", ["true", "false"])
def test_both_limits_give_one_answer(make_app: Callable[..., Flask], fast_path: str) -> None:
    # DEC-too-large-413: a message body over CLEPSYDRA_STORE_MAX_BODY_BYTES (the request under
    # its limit) and a request over CLEPSYDRA_STORE_MAX_REQUEST_BYTES: the same status and code
    app = make_app(CLEPSYDRA_STORE_MAX_REQUEST_BYTES="4096", CLEPSYDRA_STORE_MAX_BODY_BYTES="100",
                   CLEPSYDRA_STORE_FAST_PATH=fast_path)
    c = app.test_client()
    c.post("/v1/topics", json={"name": TOPIC, "queues": 1})
    before = stored_count(c)
    message = assert_error(c.post(PRODUCE, json={"body": "x" * 101}), 413, "BODY_TOO_LARGE",
                           "P1")
    request = assert_error(c.post(PRODUCE, json={"body": "x" * 5000}), 413, "BODY_TOO_LARGE",
                           "P1")
    assert "at most 100" in message["message"] and "MAX_REQUEST_BYTES" in request["message"]
    assert c.post(PRODUCE, json={"body": "x" * 100}).status_code == 201  # at the limit: stored
    assert stored_count(c) == before + 1


@pytest.mark.parametrize("raw", [b"{nope", b"", b"{\"body\": \"a\"", b"\xff\xfe", b"[1, 2]",
                                 b"\"text\"", b"null"])
def test_malformed_json_is_refused(client: FlaskClient, before: int, raw: bytes) -> None:
    for path in (PRODUCE, BATCH):
        assert_error(client.post(path, data=raw, content_type="application/json"), 400,
                     "INVALID_JSON")
    assert_error(client.post("/v1/topics", data=raw), 400, "INVALID_JSON")
    assert_error(client.put("/v1/groups/G/offsets", data=raw), 400, "INVALID_JSON")
    assert_error(client.post("/v1/internal/copy", data=raw), 400, "INVALID_JSON")
    still_up(client, before)


@pytest.mark.parametrize("message", [
    {"body": 5},
    {"body": ["a"]},
    {"bodyBase64": 12},
    {"body": "a", "tags": 1},
    {"body": "a", "keys": {"k": 1}},
    {"body": "a", "properties": ["x"], "_code": "INVALID_PROPERTIES"},
    {"body": "a", "properties": {"p": 1}, "_code": "INVALID_PROPERTIES"},
    {"body": "a", "queueId": "0"},
    {"body": "a", "queueId": -1},
    {"body": "a", "queueId": True},
    {"body": "a", "delayLevel": "1"},
    {"body": "a", "delayLevel": 1.5},
    {"body": "a", "flag": None, "bornTimestamp": "now"},
    {"body": "a", "unknownField": 1},
])
def test_wrong_json_types_are_refused(client: FlaskClient, before: int,
                                      message: dict[str, object]) -> None:
    message = dict(message)
    code = str(message.pop("_code", "INVALID_REQUEST"))
    body = assert_error(client.post(PRODUCE, json=message), 400, code)
    assert body["message"]
    assert_error(client.post(BATCH, json={"messages": [message]}), 400, code)
    still_up(client, before)


@pytest.mark.parametrize("payload", [{"messages": {"body": "a"}}, {"messages": "a"},
                                     {"messages": []}, {"messages": [1]}, {"message": []}])
def test_wrong_batch_shapes_are_refused(client: FlaskClient, before: int,
                                        payload: dict[str, object]) -> None:
    assert_error(client.post(BATCH, json=payload), 400, "INVALID_REQUEST")
    still_up(client, before)


def test_wrong_types_on_other_routes(client: FlaskClient, before: int) -> None:
    assert_error(client.post("/v1/topics", json={"name": TOPIC, "queues": "2"}), 400,
                 "INVALID_REQUEST")
    assert_error(client.post("/v1/topics", json={"name": "t2", "queues": 0}), 400,
                 "INVALID_REQUEST")
    assert_error(client.put("/v1/groups/G/offsets", json={"topic": TOPIC, "queueId": 0,
                                                          "offset": "1"}), 400, "INVALID_REQUEST")
    assert_error(client.post("/v1/groups/G/heartbeat", json={"clientId": 7}), 400,
                 "INVALID_REQUEST")
    assert_error(client.post("/v1/groups/G/heartbeat",
                             json={"clientId": "c", "subscriptions": ["t"]}), 400,
                 "INVALID_REQUEST")
    assert_error(client.post("/v1/groups/G/heartbeat",
                             json={"clientId": "c", "messageModel": "PUSH"}), 400,
                 "INVALID_REQUEST")
    assert_error(client.get(f"/v1/topics/{TOPIC}/queues/0/messages?offset=abc"), 400,
                 "INVALID_REQUEST")
    assert_error(client.get(f"/v1/topics/{TOPIC}/queues/0/messages?max=0"), 400,
                 "INVALID_REQUEST")
    assert_error(client.get(f"/v1/topics/{TOPIC}/queues/0/messages?max=1001"), 400,
                 "INVALID_REQUEST")
    assert_error(client.get("/v1/commitlog/abc"), 400, "INVALID_REQUEST")
    assert_error(client.get("/v1/messages/not%20a%20msgid"), 400, "INVALID_MSG_ID")
    assert_error(client.post("/v1/schedule/levels/1/handover", json={"fromOffset": "0"}), 400,
                 "INVALID_REQUEST")
    assert_error(client.get("/v1/schedule/levels/0/entries"), 400, "INVALID_DELAY_LEVEL", "L3")
    assert_error(client.get("/v1/schedule/levels/4/entries"), 400, "INVALID_DELAY_LEVEL", "L3")
    still_up(client, before)


def test_negative_delay_level_is_refused(client: FlaskClient, before: int) -> None:
    # SPEC L2: level < 0 on a produce request, nothing stored
    assert_error(client.post(PRODUCE, json={"body": "a", "delayLevel": -1}), 400,
                 "INVALID_DELAY_LEVEL", "L2")
    assert_error(client.post("/v1/topics/%25RETRY%25G/messages",
                             json={"body": "a", "delayLevel": -3}), 400,
                 "INVALID_DELAY_LEVEL", "L2")
    still_up(client, before)


def test_body_and_body_base64_together_are_refused(client: FlaskClient, before: int) -> None:
    body = assert_error(client.post(PRODUCE, json={"body": "a", "bodyBase64": "YQ=="}), 400,
                        "BODY_AND_BASE64")
    assert "bodyBase64" in body["message"]
    still_up(client, before)


@pytest.mark.parametrize("encoded", ["YQ", "@@@@", "YQ==YQ==x", "Y Q = ="])
def test_invalid_base64_is_refused(client: FlaskClient, before: int, encoded: str) -> None:
    assert_error(client.post(PRODUCE, json={"bodyBase64": encoded}), 400, "INVALID_BASE64")
    still_up(client, before)


def test_missing_body_is_refused(client: FlaskClient, before: int) -> None:
    assert_error(client.post(PRODUCE, json={"tags": "a"}), 400, "MISSING_BODY")
    still_up(client, before)


@pytest.mark.parametrize("path", ["SCHEDULE_TOPIC_XXXX", "%25DLQ%25G", "%25SCHEDULE_ERROR%25",
                                  "RMQ_SYS_TRANS_HALF_TOPIC"])
def test_producing_to_a_system_topic_is_forbidden(client: FlaskClient, before: int,
                                                  path: str) -> None:
    # SPEC S3 (a %RETRY% plain send is allowed: R9/R10)
    assert_error(client.post(f"/v1/topics/{path}/messages", json={"body": "a"}), 403,
                 "FORBIDDEN", "S3")
    assert_error(client.post(f"/v1/topics/{path}/messages/batch",
                             json={"messages": [{"body": "a"}]}), 403, "FORBIDDEN", "S3")
    still_up(client, before)


def test_creating_a_system_topic_publicly_is_forbidden(client: FlaskClient, before: int) -> None:
    assert_error(client.post("/v1/topics", json={"name": "%RETRY%G", "queues": 1}), 403,
                 "FORBIDDEN", "S3")
    assert_error(client.post("/v1/internal/topics", json={"name": "plain", "queues": 1}), 403,
                 "FORBIDDEN", "S3")
    still_up(client, before)


def test_pulling_the_schedule_topic_is_forbidden(client: FlaskClient, before: int) -> None:
    # SPEC S3
    assert_error(client.get("/v1/topics/SCHEDULE_TOPIC_XXXX/queues/0/messages"), 403,
                 "FORBIDDEN", "S3")
    assert_error(client.post("/v1/groups/G/heartbeat", json={
        "clientId": "c", "subscriptions": {"SCHEDULE_TOPIC_XXXX": "*"}}), 403, "FORBIDDEN", "S3")
    assert_error(client.put("/v1/groups/G/offsets", json={
        "topic": "SCHEDULE_TOPIC_XXXX", "queueId": 0, "offset": 0}), 403, "FORBIDDEN", "S3")
    still_up(client, before)


def test_offset_or_queue_id_out_of_range(client: FlaskClient, before: int) -> None:
    # a well-formed queue id or offset the topic does not have is a position that
    # does not exist (404); a negative one is malformed (400); the code is the same
    pull = f"/v1/topics/{TOPIC}/queues"
    assert_error(client.get(f"{pull}/2/messages"), 404, "OFFSET_OUT_OF_RANGE")
    assert_error(client.get(f"{pull}/-1/messages"), 400, "OFFSET_OUT_OF_RANGE")
    assert_error(client.get(f"{pull}/0/messages?offset=1000"), 404, "OFFSET_OUT_OF_RANGE")
    assert_error(client.get(f"{pull}/0/messages?offset=-1"), 400, "OFFSET_OUT_OF_RANGE")
    assert_error(client.put("/v1/groups/G/offsets", json={"topic": TOPIC, "queueId": 5,
                                                          "offset": 0}), 404,
                 "OFFSET_OUT_OF_RANGE")
    assert_error(client.put("/v1/groups/G/offsets", json={"topic": TOPIC, "queueId": 0,
                                                          "offset": 1000}), 404,
                 "OFFSET_OUT_OF_RANGE")
    resp = client.post(PRODUCE, json={"body": "a", "queueId": 7})
    assert resp.status_code == 404, resp.get_json()
    assert stored_count(client) == before
    still_up(client, before)


def test_a_batch_with_one_bad_message_is_refused_whole(client: FlaskClient, before: int) -> None:
    good = {"body": "fine"}
    for bad, code in [({"body": "a", "delayLevel": -1}, "INVALID_DELAY_LEVEL"),
                      ({"bodyBase64": "!!"}, "INVALID_BASE64"),
                      ({"body": "a", "bodyBase64": "YQ=="}, "BODY_AND_BASE64"),
                      ({"body": 3}, "INVALID_REQUEST"),
                      ({"body": "a", "properties": {"REAL_TOPIC": "x"}}, "INVALID_PROPERTIES")]:
        body = assert_error(client.post(BATCH, json={"messages": [good, good, bad, good]}), 400,
                            code)
        assert "messages[2]" in body["message"], body
    still_up(client, before)


def test_two_delays_or_past_the_cap_are_refused(client: FlaskClient, before: int) -> None:
    # SPEC T1: two of delayLevel/deliverAt/delayMs name both; past the cap names it
    for extra, names in (({"delayMs": 5000, "delayLevel": 1}, ("delayLevel", "delayMs")),
                         ({"deliverAt": 1, "delayMs": 1}, ("deliverAt", "delayMs"))):
        body = assert_error(client.post(PRODUCE, json={"body": "a", **extra}), 400,
                            "INVALID_REQUEST", "T1")
        assert all(name in body["message"] for name in names), body
        body = assert_error(client.post(BATCH, json={"messages": [{"body": "a", **extra}]}),
                            400, "INVALID_REQUEST", "T1")
        assert "messages[0]" in body["message"], body
    year = 365 * 86_400_000
    body = assert_error(client.post(PRODUCE, json={"body": "a", "delayMs": year + 1}), 400,
                        "INVALID_REQUEST", "T1")
    assert "CLEPSYDRA_TIMER_MAX_DELAY" in body["message"] and "365d" in body["message"], body
    assert_error(client.post(PRODUCE, json={"body": "a", "delayMs": -1}), 400,
                 "INVALID_REQUEST", "T1")
    still_up(client, before)


def test_reserved_properties_are_refused(client: FlaskClient, before: int) -> None:
    # SPEC P1: a producer may set only the client-settable reserved names
    for name in ("REAL_TOPIC", "DELAY", "TAGS", "KEYS"):
        assert_error(client.post(PRODUCE, json={"body": "a", "properties": {name: "x"}}), 400,
                     "INVALID_PROPERTIES", "P1")
    still_up(client, before)


def test_unknown_routes_and_methods_answer_json(client: FlaskClient, before: int) -> None:
    assert_error(client.get("/nope"), 404, "NOT_FOUND")
    assert_error(client.get("/v1/topics/a/b/c"), 404, "NOT_FOUND")
    assert_error(client.delete("/v1/topics"), 405, "METHOD_NOT_ALLOWED")
    assert_error(client.get(PRODUCE), 405, "METHOD_NOT_ALLOWED")
    assert_error(client.put(BATCH, json={}), 405, "METHOD_NOT_ALLOWED")
    still_up(client, before)
