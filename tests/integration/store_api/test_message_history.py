"""``GET /v1/messages/{msgId}/history`` over the store's app (DEC-message-history): a delayed
message's parked and handed-over copies in order with its lateness, a group's consumed / not yet
state from its committed offset, a cancel and a reschedule, a plain message, a 404 and a bad
msgId. The whole life through the retry service (sent back, dead letter, resent) is the console's
browser scenario (tests/browser)."""

from __future__ import annotations

import time

import pytest
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core.levels import DelayLevels
from clepsydra_core.wire.history import MessageHistory
from tests.helpers import now_ms
from tests.integration.store_api.helpers import LEVELS, TOPIC, assert_error

pytestmark = pytest.mark.integration

PRODUCE = f"/v1/topics/{TOPIC}/messages"



def _history(client: FlaskClient, msg_id: str) -> MessageHistory:
    resp = client.get(f"/v1/messages/{msg_id}/history")
    assert resp.status_code == 200, resp.get_json()
    return MessageHistory.from_json(resp.get_json(), strict=True)


def test_a_timer_message_parked_handed_over_then_consumed(client: FlaskClient) -> None:
    # SPEC T1, D10, C4: parked with its deliverAt, handed over with its lateness, consumed
    # once the group's committed offset passes the copy
    at = now_ms() + 300
    sent = client.post(PRODUCE, json={"body": "x", "keys": "k1", "deliverAt": at,
                                      "queueId": 1}).get_json()
    msg_id = sent["msgId"]
    parked = _history(client, msg_id)
    assert [h.kind for h in parked.hops] == ["produced", "parked"]
    assert parked.hops[1].deliver_at == at and parked.hops[1].state == "pending"
    assert parked.hops[1].real_topic == TOPIC and parked.topic == TOPIC
    assert parked.keys == "k1" and parked.complete and parked.copies == 1
    time.sleep(0.4)
    answer = client.post("/v1/schedule/timers/handover", json={"max": 10}).get_json()
    assert answer["delivered"] == 1
    assert client.put("/v1/groups/billing/offsets", json={"topic": TOPIC, "queueId": 1,
                                                          "offset": 0}).status_code == 200
    delivered = _history(client, msg_id)
    kinds = [h.kind for h in delivered.hops]
    assert kinds == ["produced", "parked", "handed_over"]
    times = [h.time for h in delivered.hops]
    assert times == sorted(times)  # in order
    hop = delivered.hops[2]
    assert hop.topic == TOPIC and hop.queue_id == 1 and hop.queue_offset == 0
    assert hop.lateness_ms is not None and hop.lateness_ms >= 0
    assert delivered.hops[1].state == "delivered"
    assert [(g.group, g.state) for g in hop.groups or []] == [("billing", "not_yet")]
    client.put("/v1/groups/billing/offsets", json={"topic": TOPIC, "queueId": 1, "offset": 1})
    consumed = _history(client, msg_id)
    assert [(g.group, g.state) for g in consumed.groups] == [("billing", "consumed")]


def test_cancelled_and_rescheduled_messages(client: FlaskClient) -> None:
    # T1: a reschedule replaces the parked copy; a cancel ends the timeline
    one = client.post(PRODUCE, json={"body": "a", "deliverAt": now_ms() + 600_000}).get_json()
    later = now_ms() + 900_000
    assert client.patch(f"/v1/messages/{one['msgId']}",
                        json={"deliverAt": later}).status_code == 200
    before = now_ms()
    assert client.delete(f"/v1/messages/{one['msgId']}").status_code == 200
    after = now_ms()
    hist = _history(client, one["msgId"])
    assert [h.kind for h in hist.hops] == ["produced", "parked", "rescheduled", "cancelled"]
    assert hist.hops[1].state == "rescheduled" and hist.hops[2].state == "cancelled"
    assert hist.hops[2].deliver_at == later
    # the cancel's time: its tombstone's store time, found by the message's id
    cancelled_at = hist.hops[3].time
    assert cancelled_at is not None and before <= cancelled_at <= after
    # a level message cancelled: the same, its tombstone names the level's entry
    parked = client.post(PRODUCE, json={"body": "c", "delayLevel": 4}).get_json()
    assert client.delete(f"/v1/messages/{parked['msgId']}").status_code == 200
    gone = _history(client, parked["msgId"])
    assert [h.kind for h in gone.hops] == ["produced", "parked", "cancelled"]
    assert gone.hops[2].time is not None and gone.hops[2].time >= gone.hops[1].time
    # a look-up by msgId lists the stored copies only, never the tombstone
    copies = client.get(f"/v1/messages/{parked['msgId']}").get_json()["messages"]
    assert [m["topic"] for m in copies] == [naming.SCHEDULE_TOPIC]
    level = client.post(PRODUCE, json={"body": "b", "delayLevel": 3}).get_json()
    hist = _history(client, level["msgId"])
    assert hist.hops[1].kind == "parked" and hist.hops[1].level == 3
    assert hist.hops[1].topic == naming.SCHEDULE_TOPIC
    delay_ms = DelayLevels.parse(LEVELS).delay_ms(3)  # L1: the store's table
    assert hist.hops[1].deliver_at == hist.hops[1].time + delay_ms


def test_a_plain_message_is_stored_and_errors_are_clear(client: FlaskClient) -> None:
    sent = client.post(PRODUCE, json={"body": "p"}).get_json()
    hist = _history(client, sent["msgId"])
    assert [h.kind for h in hist.hops] == ["produced", "stored"]
    assert hist.hops[1].offset_msg_id == sent.get("offsetMsgId", hist.hops[1].offset_msg_id)
    assert_error(client.get("/v1/messages/0123456789ABCDEF0123456789ABCDEF/history"), 404,
                 "MESSAGE_NOT_FOUND")
    assert_error(client.get("/v1/messages/bad%20id/history"), 400, "INVALID_MSG_ID")
