"""A produce's request span is handed to its handler, not made current when it will not be
recorded (DEC-produce-span-handed): the message still carries it (O1), nothing of it stays
current after the answer, and a 5xx's log line still names the request's trace. On the
poller's two ways (one request, several answered as one append) and on a thread's (Flask)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from opentelemetry import trace

from clepsydra_core.runtime import logging as clogging
from clepsydra_store import inline
from clepsydra_store.app import create_app
from clepsydra_store.worker import InlineProduce
from tests.integration.store_api.helpers import TOPIC, context, settings_for

pytestmark = pytest.mark.integration

REMOTES = [("127.0.0.1", 40000 + i) for i in range(3)]
PARENTS = [f"00-{i:032x}-{i + 100:016x}-00" for i in (7, 8, 9)]
"""Callers' trace contexts (not sampled: the request spans are context-only)."""


def _request(traceparent: str) -> bytes:
    body = b'{"body":"hi"}'
    return (f"POST /v1/topics/{TOPIC}/messages HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\ntraceparent: {traceparent}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(settings_for(tmp_path))
    assert app.test_client().post("/v1/topics", json={"name": TOPIC, "queues": 2}) \
        .status_code == 201
    yield app
    context(app).close()


def _poller(app: Flask) -> InlineProduce:
    poller = InlineProduce.of(app)
    assert poller is not None
    return poller


def _answers(app: Flask, grouped: bool) -> list[inline.Served]:
    """The poller's answers to one produce per caller of :data:`PARENTS`."""
    poller = _poller(app)
    served: list[inline.Served] = []
    if grouped:
        got: dict[int, inline.Served] = {}
        poller.serve_group([(_request(p), r) for p, r in zip(PARENTS, REMOTES, strict=True)],
                           lambda i, s: got.__setitem__(i, s))
        served = [got[i] for i in range(len(PARENTS))]
    else:
        served = [poller.serve(_request(p), r) for p, r in zip(PARENTS, REMOTES, strict=True)]
    return served


@pytest.mark.parametrize("grouped", [False, True])
def test_each_message_carries_its_request_span_and_nothing_stays_current(
        app: Flask, grouped: bool) -> None:
    served = _answers(app, grouped)
    assert trace.get_current_span() is trace.INVALID_SPAN
    client = app.test_client()
    for parent, one in zip(PARENTS, served, strict=True):
        head, _, body = one.out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 201"), one.out
        msg_id = json.loads(body)["msgId"]
        stored = client.get(f"/v1/messages/{msg_id}").get_json()["messages"][0]
        version, trace_hex, span_hex, flags = stored["properties"]["traceparent"].split("-")
        assert (version, trace_hex, flags) == ("00", parent.split("-")[1], "00")
        assert span_hex != parent.split("-")[2]  # the request's own span, a child


class _Lines(logging.Handler):
    """Each record's log-line fields as the service's formatter makes them (trace ids read
    while the record is emitted)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(clogging.fields(record))


@pytest.mark.parametrize("way", ["one", "grouped", "flask"])
def test_a_failed_produce_logs_its_request_trace(app: Flask, way: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault injected in the engine's append (every way in reaches it): the 500's log line
    names the caller's trace."""
    store = context(app).store

    def broken(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    def broken_each(requests: list[Any]) -> list[Exception]:  # put_group: one outcome each
        return [RuntimeError("disk on fire") for _ in requests]

    monkeypatch.setattr(store, "put", broken)
    monkeypatch.setattr(store, "put_group", broken_each)
    lines = _Lines()
    logging.getLogger().addHandler(lines)
    try:
        if way == "flask":
            for parent in PARENTS:
                answer = app.test_client().post(f"/v1/topics/{TOPIC}/messages",
                                                json={"body": "hi"},
                                                headers={"traceparent": parent})
                assert answer.status_code == 500
        else:
            for one in _answers(app, way == "grouped"):
                assert one.out.startswith(b"HTTP/1.1 500"), one.out
    finally:
        logging.getLogger().removeHandler(lines)
    failed = [line for line in lines.lines if line["message"] == "unexpected error"]
    assert [line.get("trace_id") for line in failed] == [p.split("-")[1] for p in PARENTS]
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.parametrize(("headers", "own", "kept"), [
    ({"traceparent": PARENTS[0], "tracestate": "vendor=abc"}, None, "vendor=abc"),
    ({"traceparent": f"01-{PARENTS[0][3:]}-future"}, None, None),
    ({}, PARENTS[1], None),
])
@pytest.mark.parametrize("grouped", [False, True])
def test_a_context_not_taken_as_it_is_is_read_as_before(
        app: Flask, headers: dict[str, str], own: str | None, kept: str | None,
        grouped: bool) -> None:
    """A ``tracestate``, another version, or a message's own ``traceparent`` (no header): the
    message carries what it did before DEC-produce-span-handed - its own context, else a child
    of the caller's with the caller's ``tracestate``."""
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    body = json.dumps({"body": "hi", **({"properties": {"traceparent": own}} if own else {})})
    raw = (f"POST /v1/topics/{TOPIC}/messages HTTP/1.1\r\nHost: x\r\n"
           f"Content-Type: application/json\r\n{fields}"
           f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
    poller = _poller(app)
    got: dict[int, inline.Served] = {}
    if grouped:
        poller.serve_group([(raw, REMOTES[0]), (raw, REMOTES[1])],
                           lambda i, s: got.__setitem__(i, s))
    else:
        got[0] = poller.serve(raw, REMOTES[0])
    for one in got.values():
        msg_id = json.loads(one.out.partition(b"\r\n\r\n")[2])["msgId"]
        props = app.test_client().get(f"/v1/messages/{msg_id}").get_json()["messages"][0][
            "properties"]
        if own is not None:
            assert props["traceparent"] == own
        else:
            _, trace_hex, span_hex, _ = props["traceparent"].split("-")
            assert trace_hex == PARENTS[0].split("-")[1] and span_hex != PARENTS[0].split("-")[2]
        assert props.get("tracestate") == kept
