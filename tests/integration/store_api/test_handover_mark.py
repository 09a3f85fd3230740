"""The hand-over route lets no caller skip an entry (SPEC D9)."""

from __future__ import annotations

import time

import pytest
from flask.testing import FlaskClient

from tests.integration.store_api.helpers import TOPIC
from tools.processes import wait_until

pytestmark = pytest.mark.integration


def test_a_hostile_fromoffset_moves_the_mark_by_one_entry_only(client: FlaskClient) -> None:
    # SPEC D9: {"fromOffset": 99, "max": 1} on 100 due entries hands over entry 0, not 99
    batch = client.post(f"/v1/topics/{TOPIC}/messages/batch", json={"messages": [
        {"body": f"m{i}", "delayLevel": 1, "queueId": 0} for i in range(100)]})
    assert batch.status_code == 201
    last_due = max(r["storeTimestamp"] for r in batch.get_json()["results"]) + 1_000
    wait_until(lambda: time.time() * 1000 > last_due, 10, what="deliver time")

    hostile = client.post("/v1/schedule/levels/1/handover", json={"fromOffset": 99, "max": 1})
    assert hostile.status_code == 200
    answer = hostile.get_json()
    assert (answer["fromOffset"], answer["nextOffset"], answer["delivered"],
            answer["handedOver"]) == (0, 1, 1, 0)
    [level1] = [lv for lv in client.get("/v1/schedule/levels").get_json()["levels"]
                if lv["level"] == 1]
    assert (level1["maxOffset"], level1["handedOver"]) == (100, 0)

    rest = client.post("/v1/schedule/levels/1/handover",
                       json={"fromOffset": 99, "max": 1000}).get_json()
    assert (rest["fromOffset"], rest["nextOffset"], rest["delivered"]) == (1, 100, 99)
    pulled = client.get(f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max=1000").get_json()
    assert [m["body"] for m in pulled["messages"]] == [f"m{i}" for i in range(100)]
