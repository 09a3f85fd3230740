"""Sampling in the store (SPEC O1): the OpenTelemetry sampler settings are honoured,
the decision made where the trace started travels in ``traceparent`` (a sampled producer's
message is traced here whatever this process's own ratio; an unsampled one makes no span), and
the context still reaches the stored message either way (SPEC O1)."""

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

SAMPLED_TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{SAMPLED_TRACE}-b7ad6b7169203331-01"
UNSAMPLED_TRACE = "33333333333333333333333333333333"
UNSAMPLED = f"00-{UNSAMPLED_TRACE}-4444444444444444-00"
BATCH_UNSAMPLED = "00-55555555555555555555555555555555-6666666666666666-00"


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stored_traceparents(http: requests.Session, url: str) -> dict[str, str]:
    """body -> the traceparent property of each message stored in the topic's queue 0."""
    got = http.get(f"{url}/v1/topics/{TOPIC}/queues/0/messages",
                   params={"offset": 0, "max": 10}).json()["messages"]
    return {m["body"]: m["properties"]["traceparent"] for m in got}


def test_the_producers_decision_travels_and_new_traces_follow_the_sampler_settings(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    spans_file = tmp_path / "spans.jsonl"
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": LEVELS,
                           "CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}",
                           # this process samples no new trace of its own
                           "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                           "OTEL_TRACES_SAMPLER_ARG": "0"}).url
    with requests.Session() as http:
        assert http.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}).status_code == 201
        for body, headers in (("unsampled", {"traceparent": UNSAMPLED}), ("no context", {}),
                              ("sampled", {"traceparent": SAMPLED})):
            put = http.post(f"{url}/v1/topics/{TOPIC}/messages", json={"body": body},
                            headers=headers)
            assert put.status_code == 201, put.text
        batch = http.post(f"{url}/v1/topics/{TOPIC}/messages/batch",
                          json={"messages": [{"body": "batch, unsampled"}]},
                          headers={"traceparent": BATCH_UNSAMPLED})
        assert batch.status_code == 201, batch.text
        stored = stored_traceparents(http, url)

    wait_until(lambda: bool(spans_in(spans_file)), 10, what="the sampled produce span")
    spans = [s for s in spans_in(spans_file) if s["name"].startswith("store.produce")]
    # only the sampled producer's request made a span, in its trace, under its span
    assert [(s["name"], s["traceId"], s["parentSpanId"]) for s in spans] == [
        ("store.produce", SAMPLED_TRACE, "b7ad6b7169203331")]
    # every message carries its trace context on, with the decision in its flags
    assert stored["sampled"].split("-")[1] == SAMPLED_TRACE
    assert int(stored["sampled"][-2:], 16) & 1 == 1
    assert stored["unsampled"].split("-")[1] == UNSAMPLED_TRACE
    assert int(stored["unsampled"][-2:], 16) & 1 == 0
    assert stored["batch, unsampled"].split("-")[1] == BATCH_UNSAMPLED.split("-")[1]
    new_version, new_trace, _, new_flags = stored["no context"].split("-")
    assert new_version == "00" and len(new_trace) == 32 and int(new_trace, 16) != 0
    assert int(new_flags, 16) & 1 == 0  # ratio 0: the new trace was sampled away


def test_a_sampled_message_is_traced_through_an_unsampled_hand_over(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    # the hand-over batch is a trace of its own: sampled or not, it does not decide for the
    # messages it delivers
    spans_file = tmp_path / "spans.jsonl"
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": LEVELS,
                           "CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}"}).url
    with requests.Session() as http:
        assert http.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}).status_code == 201
        put = http.post(f"{url}/v1/topics/{TOPIC}/messages",
                        json={"body": "later", "delayLevel": 1,
                              "properties": {"traceparent": SAMPLED}})
        assert put.status_code == 201, put.text
        deliver_ts = max(http.get(f"{url}/v1/schedule/levels/1/entries").json()["deliverTs"])
        wait_until(lambda: time.time() * 1000 >= deliver_ts, 10, what="due")
        r = http.post(f"{url}/v1/schedule/levels/1/handover", json={"fromOffset": 0, "max": 10},
                      headers={"traceparent": UNSAMPLED}).json()
        assert r["delivered"] == 1, r
    wait_until(lambda: any(s["name"] == "store.deliver" for s in spans_in(spans_file)), 10,
               what="deliver span")
    spans = spans_in(spans_file)
    [deliver] = [s for s in spans if s["name"] == "store.deliver"]
    assert deliver["traceId"] == SAMPLED_TRACE
    assert deliver["links"] == []  # the hand-over's span was not recorded: nothing to link
    assert not [s for s in spans if s["name"] == "store.handover"]
