"""The hand-over's ``store.deliver`` span continues the producer's trace (SPEC O1, D10)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.store_api.helpers import LEVELS, TOPIC
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"
HANDOVER_PARENT = "00-11111111111111111111111111111111-2222222222222222-01"
UNSAMPLED = "00-33333333333333333333333333333333-4444444444444444-00"


def spans_named(path: Path, name: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    spans = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [s for s in spans if s["name"] == name]


def test_delivery_span_is_in_the_producers_trace(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    # SPEC O1: one trace shows produce -> park -> deliver; SPEC D10: lateness on the span
    spans_file = tmp_path / "spans.jsonl"
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": LEVELS,
                           "CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}"}).url
    with requests.Session() as http:
        assert http.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}).status_code == 201
        put = http.post(f"{url}/v1/topics/{TOPIC}/messages",
                        json={"body": "later", "delayLevel": 1,
                              "properties": {"traceparent": TRACEPARENT}})
        assert put.status_code == 201, put.text
        unsampled = http.post(f"{url}/v1/topics/{TOPIC}/messages",
                              json={"body": "later, untraced", "delayLevel": 1,
                                    "properties": {"traceparent": UNSAMPLED}})
        assert unsampled.status_code == 201, unsampled.text
        deliver_ts = max(http.get(f"{url}/v1/schedule/levels/1/entries").json()["deliverTs"])
        wait_until(lambda: time.time() * 1000 >= deliver_ts, 10, what="due")
        r = http.post(f"{url}/v1/schedule/levels/1/handover",
                      json={"fromOffset": 0, "max": 10},
                      headers={"traceparent": HANDOVER_PARENT}).json()
        assert r["delivered"] == 2, r
        msg, _ = http.get(f"{url}/v1/topics/{TOPIC}/queues/0/messages",
                          params={"offset": 0, "max": 10}).json()["messages"]
    wait_until(lambda: bool(spans_named(spans_file, "store.deliver")), 10, what="deliver span")
    # the producer's unsampled trace gets no deliver span (parent-based sampling, skipped
    # before any span is made)
    [deliver] = spans_named(spans_file, "store.deliver")
    [handover] = spans_named(spans_file, "store.handover")
    assert deliver["traceId"] == TRACE_ID
    assert deliver["parentSpanId"] == PARENT_SPAN
    assert handover["traceId"] == HANDOVER_PARENT.split("-")[1]
    assert deliver["attributes"]["messaging.destination.name"] == TOPIC
    assert deliver["attributes"]["messaging.message.id"] == msg["msgId"]
    assert deliver["attributes"]["clepsydra.delay_level"] == 1
    assert deliver["attributes"]["clepsydra.lateness_ms"] == r["latenessMs"][0]
    assert deliver["links"] == [handover["traceId"]]  # linked to the hand-over's trace
