"""Produce at the public seam, property-based (SPEC S1, R10, P1): random produce
requests — plain, Unicode, binary bodies, tags, keys, properties, delay levels, plain sends to a
`%RETRY%` topic below and at their max — go through the HTTP API, once through the produce fast
path and once through Flask's routes. Every field comes back as sent, the message lands where
the rules say, and the bytes on disk equal the reference encoding of the record
(``clepsydra_core.records.encode_record``, the readable encoder the fast one must agree with)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.records import decode_record, encode_record
from clepsydra_store.app import create_app
from tests.integration.store_api.helpers import LEVELS, context, settings_for

pytestmark = pytest.mark.integration

TOPIC = "orders"
RETRY = naming.retry_topic("G")
MAX_LEVEL = len(LEVELS.split())
EXAMPLES = 60

_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)
_word = st.text(alphabet=st.characters(exclude_categories=("Cs", "Z", "C")), min_size=1,
                max_size=12)


@dataclass(frozen=True)
class Sent:
    topic: str
    body: dict[str, str]
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    delay_level: int
    queue_id: int | None

    def request(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.body)
        if self.tags is not None:
            out["tags"] = self.tags
        if self.keys:
            out["keys"] = " ".join(self.keys)
        if self.properties:
            out["properties"] = self.properties
        if self.delay_level:
            out["delayLevel"] = self.delay_level
        if self.queue_id is not None:
            out["queueId"] = self.queue_id
        return out

    @property
    def body_bytes(self) -> bytes:
        if "body" in self.body:
            return self.body["body"].encode()
        return base64.b64decode(self.body["bodyBase64"])


@st.composite
def sends(draw: st.DrawFn) -> Sent:
    body = draw(st.one_of(st.builds(lambda t: {"body": t}, _text),
                          st.builds(lambda b: {"bodyBase64": base64.b64encode(b).decode()},
                                    st.binary(max_size=64))))
    props = draw(st.dictionaries(st.from_regex(r"user_[a-z]{1,8}", fullmatch=True), _text,
                                 max_size=3))
    if draw(st.booleans()):  # a plain send to a retry topic (R10 below or at its max)
        max_times = draw(st.integers(0, 4))
        reconsume = draw(st.integers(0, 5))
        props = {**props, P.RECONSUME_TIME: str(reconsume),
                 P.MAX_RECONSUME_TIMES: str(max_times)}
        return Sent(RETRY, body, draw(st.none() | _word), draw(st.lists(_word, max_size=3)),
                    props, 0, None)
    return Sent(TOPIC, body, draw(st.none() | _word), draw(st.lists(_word, max_size=3)), props,
                draw(st.integers(0, MAX_LEVEL + 2)), draw(st.none() | st.integers(0, 1)))


def expected_placement(sent: Sent) -> tuple[str, dict[str, str], int]:
    """(topic the record is stored under, properties the store adds, reconsumeTimes)."""
    if sent.topic == RETRY:
        reconsume = int(sent.properties[P.RECONSUME_TIME])
        if reconsume >= int(sent.properties[P.MAX_RECONSUME_TIMES]):  # R10
            return naming.dlq_topic("G"), {P.DLQ_REASON: "max_reconsume_times"}, reconsume
        return RETRY, {}, reconsume
    if sent.delay_level:  # S1: parked, level clamped (L2)
        level = min(sent.delay_level, MAX_LEVEL)
        return naming.SCHEDULE_TOPIC, {P.DELAY: str(level), P.REAL_TOPIC: TOPIC}, 0
    return TOPIC, {}, 0


def stored_bytes(app: Flask, commitlog_offset: int) -> bytes:
    """The record's bytes as the CommitLog file holds them."""
    store_dir = context(app).settings.engine.data_dir / naming.COMMITLOG_DIR
    start = max(int(p.name) for p in store_dir.iterdir() if int(p.name) <= commitlog_offset)
    raw = (store_dir / f"{start:020d}").read_bytes()
    pos = commitlog_offset - start
    return raw[pos:pos + int.from_bytes(raw[pos:pos + 4], "big")]


@pytest.mark.parametrize("fast_path", ["true", "false"])
def test_random_produce_requests_round_trip_and_match_the_reference_encoding(
        tmp_path: Path, fast_path: str) -> None:
    app = create_app(settings_for(tmp_path / "home", CLEPSYDRA_STORE_FAST_PATH=fast_path))
    client: FlaskClient = app.test_client()
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(sends())
    def check(sent: Sent) -> None:
        resp = client.post(f"/v1/topics/{quote(sent.topic, safe='')}/messages",
                           json=sent.request())
        assert resp.status_code == 201, resp.get_json()
        result = resp.get_json()
        topic, added, reconsume = expected_placement(sent)
        assert result["topic"] == topic
        message = client.get(f"/v1/commitlog/{result['commitLogOffset']}").get_json()
        assert message["msgId"] == result["msgId"] and message["topic"] == topic
        assert message["queueOffset"] == result["queueOffset"]
        if "body" in sent.body:
            assert message["body"] == sent.body["body"]
        else:
            assert base64.b64decode(message.get("bodyBase64") or
                                    base64.b64encode(message["body"].encode())) \
                == sent.body_bytes
        assert message["tags"] == (sent.tags or None)
        assert message["keys"] == " ".join(sent.keys)
        assert message["reconsumeTimes"] == reconsume
        props = dict(message["properties"])
        assert props.pop(P.TRACEPARENT, "").startswith("00-")  # the produce span's (O1)
        want = {**sent.properties, **added}
        if not want.get(P.UNIQ_KEY):  # the store gives the message its unique id
            assert re.fullmatch(r"[0-9A-F]{32}", result["msgId"])
            want[P.UNIQ_KEY] = result["msgId"]
        assert message["offsetMsgId"] == result["offsetMsgId"] != result["msgId"]
        if sent.tags:
            want[P.TAGS] = sent.tags
        if sent.keys:
            want[P.KEYS] = " ".join(sent.keys)
        if topic == naming.SCHEDULE_TOPIC:
            assert 0 <= int(props.pop(P.REAL_QID)) < 2
            if sent.queue_id is not None:
                want[P.REAL_QID] = str(sent.queue_id)
                props[P.REAL_QID] = want[P.REAL_QID]
            assert message["queueId"] == min(sent.delay_level, MAX_LEVEL) - 1  # L3
        elif sent.queue_id is not None and topic == TOPIC:
            assert message["queueId"] == sent.queue_id
        assert props == want
        raw = stored_bytes(app, result["commitLogOffset"])
        record, size = decode_record(raw)
        assert size == len(raw) and record.body == sent.body_bytes
        assert encode_record(record) == raw

    try:
        check()
    finally:
        context(app).close()
