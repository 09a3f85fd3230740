"""The timer routes over HTTP (SPEC T1): produce with deliverAt/delayMs and the answer's
deliverAt, cancel and reschedule by msgId and by key with their 200/404/409 answers, the timer
backlog, the timer hand-over; both produce paths (fast and Flask)."""

from __future__ import annotations

import pytest
from flask import Flask, request
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core.wire.timers import (
    KeyCancelled,
    KeyRescheduled,
    MessageCancelled,
    MessageRescheduled,
    TimerBacklog,
    TimerHandoverAnswer,
)
from tests.helpers import now_ms
from tests.integration.store_api.helpers import TOPIC, assert_error

pytestmark = pytest.mark.integration

ADMIN = "clp_admin-token-for-the-lean-hand-over-test-0001"

PRODUCE = f"/v1/topics/{TOPIC}/messages"
BATCH = f"/v1/topics/{TOPIC}/messages/batch"
HANDOVER = "/v1/schedule/timers/handover"



@pytest.fixture
def client(app: Flask) -> FlaskClient:
    c = app.test_client()
    assert c.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    return c


def _pulled(client: FlaskClient) -> list[str]:
    out: list[str] = []
    for queue_id in range(2):
        page = client.get(f"{PRODUCE.rsplit('/', 1)[0]}/queues/{queue_id}/messages").get_json()
        out += [m["body"] for m in page["messages"]]
    return sorted(out)


def test_produce_answers_the_effective_delivery_time(client: FlaskClient) -> None:
    # SPEC T1: single and batch; a time in the past delivers now
    at = now_ms() + 60_000
    one = client.post(PRODUCE, json={"body": "a", "deliverAt": at}).get_json()
    assert one["deliverAt"] == at and one["topic"] == naming.TIMER_TOPIC
    results = client.post(BATCH, json={"messages": [
        {"body": "b", "delayMs": 5_000}, {"body": "c", "deliverAt": 5}, {"body": "d"}]}
    ).get_json()["results"]
    assert results[0]["deliverAt"] == results[0]["storeTimestamp"] + 5_000
    assert results[1]["deliverAt"] == results[1]["storeTimestamp"]  # past: now
    assert "deliverAt" not in results[2] and results[2]["topic"] == TOPIC
    handed = TimerHandoverAnswer.from_json(client.post(HANDOVER, json={"max": 10}).get_json())
    assert handed.delivered == 1 and _pulled(client) == ["c", "d"]


def test_cancel_and_reschedule_by_msg_id(client: FlaskClient) -> None:
    # SPEC T1: 200 cancelled / rescheduled, 409 ALREADY_DELIVERED, 404 unknown
    timer = client.post(PRODUCE, json={"body": "t", "delayMs": 60_000}).get_json()["msgId"]
    level = client.post(PRODUCE, json={"body": "l", "delayLevel": 3}).get_json()["msgId"]
    plain = client.post(PRODUCE, json={"body": "p"}).get_json()["msgId"]
    resp = client.delete(f"/v1/messages/{timer}")
    assert MessageCancelled.from_json(resp.get_json()) == MessageCancelled("cancelled", timer)
    assert client.delete(f"/v1/messages/{timer}").status_code == 200  # idempotent
    at = now_ms() - 1  # in the past: due now
    resp = client.patch(f"/v1/messages/{level}", json={"deliverAt": at})
    answer = MessageRescheduled.from_json(resp.get_json())
    assert answer.status == "rescheduled" and answer.msg_id == level and answer.deliver_at >= at
    assert client.post(HANDOVER, json={"max": 10}).get_json()["delivered"] == 1
    assert _pulled(client) == ["l", "p"]
    assert_error(client.delete(f"/v1/messages/{level}"), 409, "ALREADY_DELIVERED")
    assert_error(client.patch(f"/v1/messages/{plain}", json={"delayMs": 1}), 409,
                 "ALREADY_DELIVERED")
    assert_error(client.delete(f"/v1/messages/{'0' * 32}"), 404, "MESSAGE_NOT_FOUND")
    assert_error(client.patch(f"/v1/messages/{timer}", json={"delayMs": 1}), 404,
                 "MESSAGE_NOT_FOUND")  # cancelled: nothing to reschedule


def test_reschedule_body_needs_exactly_one_time_within_the_cap(client: FlaskClient) -> None:
    # SPEC T1: exactly one of deliverAt and delayMs; the cap named; nothing changed
    msg_id = client.post(PRODUCE, json={"body": "t", "delayMs": 60_000}).get_json()["msgId"]
    for body in ({}, {"deliverAt": 1, "delayMs": 1}, {"delayMs": -5}, {"at": 1}):
        assert_error(client.patch(f"/v1/messages/{msg_id}", json=body), 400, "INVALID_REQUEST")
    body = assert_error(client.patch(f"/v1/messages/{msg_id}",
                                     json={"delayMs": 366 * 86_400_000}), 400, "INVALID_REQUEST")
    assert "CLEPSYDRA_TIMER_MAX_DELAY" in body["message"]
    assert TimerBacklog.from_json(client.get("/v1/schedule/timers").get_json()).pending == 1


def test_by_key_cancel_and_reschedule(client: FlaskClient) -> None:
    # SPEC T1: every pending delayed message of the topic with the key; 409 / 404
    ids = [r["msgId"] for r in client.post(BATCH, json={"messages": [
        {"body": "a", "delayMs": 60_000, "keys": "cart-9"},
        {"body": "b", "delayLevel": 3, "keys": ["cart-9", "x"]},
        {"body": "c", "delayMs": 60_000, "keys": "other"}]}).get_json()["results"]]
    url = f"/v1/messages?topic={TOPIC}&key=cart-9"
    at = now_ms() + 120_000
    moved = KeyRescheduled.from_json(client.patch(url, json={"deliverAt": at}).get_json())
    assert sorted(moved.msg_ids) == sorted(ids[:2]) and moved.deliver_at == at
    gone = KeyCancelled.from_json(client.delete(url).get_json())
    assert gone.status == "cancelled" and sorted(gone.msg_ids) == sorted(ids[:2])
    backlog = TimerBacklog.from_json(client.get("/v1/schedule/timers").get_json())
    assert backlog.pending == 1 and backlog.next_due_at is not None
    assert_error(client.delete(f"/v1/messages?topic={TOPIC}&key=nothing"), 404,
                 "MESSAGE_NOT_FOUND")
    assert_error(client.delete(f"/v1/messages?topic={TOPIC}"), 400, "INVALID_REQUEST")
    client.post(PRODUCE, json={"body": "now", "deliverAt": 1, "keys": "done"})
    client.post(HANDOVER, json={"max": 10})
    assert_error(client.delete(f"/v1/messages?topic={TOPIC}&key=done"), 409,
                 "ALREADY_DELIVERED")


def test_timer_handover_waits_for_the_next_due_time(client: FlaskClient) -> None:
    # SPEC T1: a hand-over call waits in the store until the timer is due, never early
    at = now_ms() + 300
    client.post(PRODUCE, json={"body": "w", "deliverAt": at})
    answer = client.post(HANDOVER, json={"max": 10, "waitMs": 2_000}).get_json()
    assert answer["delivered"] == 1 and answer["latenessMs"][0] >= 0
    assert_error(client.post(HANDOVER, json={"max": 0}), 400, "INVALID_REQUEST")


def _answers(app: Flask, seen: list[str | None]) -> list[tuple[int, dict[str, object]]]:
    """The hand-over's answers of one app: due timers handed over, a strict body refused, a body
    over the size limit, metrics counted; each only after Flask's hooks ran or did not."""
    client = app.test_client()
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    client.post(PRODUCE, json={"body": "due", "deliverAt": 1})
    seen.clear()
    out = []
    for body in ({"max": 10}, {"max": 10, "bogus": 1}, {"max": 10, "waitMs": "x" * 3000},
                 {"max": 10}):
        resp = client.post(HANDOVER, json=body)
        answer = resp.get_json()
        answer.pop("latenessMs", None)
        answer.pop("nextDueAt", None)
        out.append((resp.status_code, answer))
    metrics = client.get("/metrics").get_data(as_text=True)
    counted = [line.split("} ")[1] for line in metrics.splitlines() if line.startswith(
        'clepsydra_store_requests_total{operation="timer_handover",status=')]
    out.append((0, {"counted": counted}))
    return out


def test_the_lean_path_answers_the_timer_handover(make_app: object) -> None:
    # the scheduler's POST /v1/schedule/timers/handover is answered below
    # Flask by the store's lean path (Flask's hooks do not run for it) with the answers Flask's
    # view gives: the hand-over (T1, D9: once), 400 for an unknown field, 413 over the size
    # limit, the request metrics; read-only store refused (R2); access control (401, 403 for
    # a token without SCHEDULE_HANDOVER)
    assert callable(make_app)
    results = {}
    for fast in ("true", "false"):
        app: Flask = make_app(CLEPSYDRA_STORE_FAST_PATH=fast,
                              CLEPSYDRA_STORE_MAX_REQUEST_BYTES="2048")
        seen: list[str | None] = []
        app.before_request(lambda seen=seen: seen.append(request.endpoint))
        results[fast] = _answers(app, seen)
        assert ("timers.timer_handover" in seen) == (fast == "false"), seen
    assert results["true"] == results["false"]
    (ok, _), (bad, unknown), (big, over), (again, _), (_, metrics) = results["true"]
    assert (ok, bad, unknown["error"], big, over["error"], again) == (
        200, 400, "INVALID_REQUEST", 413, "BODY_TOO_LARGE", 200)  # DEC-too-large-413
    assert results["true"][0][1]["delivered"] == 1 and results["true"][3][1]["delivered"] == 0
    assert sorted(metrics["counted"]) == ["1.0", "1.0", "2.0"]  # type: ignore[call-overload]
    for fast in ("true", "false"):
        client = make_app(CLEPSYDRA_STORE_FAST_PATH=fast,
                          CLEPSYDRA_STORE_WRITABLE="false").test_client()
        assert_error(client.post(HANDOVER, json={"max": 10}), 403, "NO_PERMISSION", "R2")
        client = make_app(CLEPSYDRA_STORE_FAST_PATH=fast, CLEPSYDRA_AUTH="on",
                          CLEPSYDRA_AUTH_ADMIN_TOKEN=ADMIN).test_client()
        refused = client.post(HANDOVER, json={"max": 10})
        assert_error(refused, 401, "UNAUTHORIZED")
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert_error(client.post(HANDOVER, json={"max": 10},
                                 headers={"Authorization": f"Bearer {ADMIN}"}),
                     403, "FORBIDDEN")
