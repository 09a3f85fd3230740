"""The SDK's producer under a ratio sampler (SPEC O1): every message of a
batch gets its own trace context, sampled or not; a ``client.produce`` span is made only for
the sampled ones, and its trace is the one its message carries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core.runtime import telemetry
from tools.processes import HttpService

pytestmark = pytest.mark.integration

TOPIC = "sampled"


@pytest.fixture
def half_sampled(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """This process's provider at ``parentbased_traceidratio`` 0.5, spans kept in memory."""
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_traceidratio")
    monkeypatch.setenv(telemetry.SAMPLER_ARG_VAR, "0.5")
    telemetry.reset_after_fork()
    provider = telemetry.init_tracing(telemetry.CLIENT_SERVICE, "none")
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    provider.shutdown()


def test_each_message_of_a_batch_carries_its_own_decision(
        tmp_path: Path, start_store: Callable[..., HttpService],
        half_sampled: InMemorySpanExporter) -> None:
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": "1s"}).url
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1},
                         timeout=10).status_code == 201
    with Producer(url) as producer:
        results = producer.send_batch(TOPIC, [OutgoingMessage(f"m{i}") for i in range(100)])
    got = requests.get(f"{url}/v1/topics/{TOPIC}/queues/0/messages",
                       params={"offset": 0, "max": 100}, timeout=10).json()["messages"]
    assert [m["msgId"] for m in got] == [r.msg_id for r in results]
    carried = {m["msgId"]: m["properties"]["traceparent"].split("-") for m in got}
    assert len({trace_id for _, trace_id, _, _ in carried.values()}) == 100  # one trace each
    sampled = {msg_id: (trace_id, span_id) for msg_id, (_, trace_id, span_id, flags)
               in carried.items() if int(flags, 16) & 1}
    assert 0 < len(sampled) < 100  # ~50: both kinds are there
    spans = half_sampled.get_finished_spans()
    recorded = {}
    for span in spans:
        assert span.name == "client.produce" and span.context and span.attributes
        recorded[span.attributes[telemetry.MESSAGE_ID]] = (f"{span.context.trace_id:032x}",
                                                          f"{span.context.span_id:016x}")
    assert recorded == sampled  # a span for, and only for, each sampled message


def test_each_async_message_carries_its_own_decision(
        tmp_path: Path, start_store: Callable[..., HttpService],
        half_sampled: InMemorySpanExporter) -> None:
    """``send_async`` makes a span object only for a sampled message (the others
    get their ``traceparent`` alone); each span ends with its future, naming its msgId."""
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": "1s"}).url
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1},
                         timeout=10).status_code == 201
    with Producer(url, linger_ms=60_000, batch_messages=40) as producer:
        futures = [producer.send_async(TOPIC, f"m{i}") for i in range(100)]
        assert producer.flush(30)
    results = [f.result(0) for f in futures]
    got = requests.get(f"{url}/v1/topics/{TOPIC}/queues/0/messages",
                       params={"offset": 0, "max": 100}, timeout=10).json()["messages"]
    # two sender threads: batches may be stored in either order, each future has its own
    assert {m["msgId"]: m["body"] for m in got} == {
        r.msg_id: f"m{i}" for i, r in enumerate(results)}
    carried = {m["msgId"]: m["properties"]["traceparent"].split("-") for m in got}
    assert len({trace_id for _, trace_id, _, _ in carried.values()}) == 100
    sampled = {msg_id: (trace_id, span_id) for msg_id, (_, trace_id, span_id, flags)
               in carried.items() if int(flags, 16) & 1}
    assert 0 < len(sampled) < 100
    recorded = {}
    for span in half_sampled.get_finished_spans():
        assert span.name == "client.produce" and span.context and span.attributes
        recorded[span.attributes[telemetry.MESSAGE_ID]] = (f"{span.context.trace_id:032x}",
                                                          f"{span.context.span_id:016x}")
    assert recorded == sampled


def test_async_messages_sent_inside_a_span_continue_its_trace(
        tmp_path: Path, start_store: Callable[..., HttpService],
        half_sampled: InMemorySpanExporter) -> None:
    """New traces are drawn 64 at a time for ``send_async``, but only while no span
    is current: a message sent inside one is that span's child, before and after the stock."""
    url = start_store(env={"CLEPSYDRA_DELAY_LEVELS": "1s"}).url
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1},
                         timeout=10).status_code == 201
    tracer = telemetry.tracer("test")
    with Producer(url, linger_ms=60_000) as producer:
        before = [producer.send_async(TOPIC, f"before{i}") for i in range(3)]  # a stock drawn
        with tracer.start_as_current_span("app.request") as parent:
            inside = [producer.send_async(TOPIC, f"inside{i}") for i in range(3)]
        after = [producer.send_async(TOPIC, f"after{i}") for i in range(3)]
        assert producer.flush(30)
    got = requests.get(f"{url}/v1/topics/{TOPIC}/queues/0/messages",
                       params={"offset": 0, "max": 100}, timeout=10).json()["messages"]
    trace_of = {m["body"]: m["properties"]["traceparent"].split("-")[1] for m in got}
    parent_trace = f"{parent.get_span_context().trace_id:032x}"
    assert {trace_of[f"inside{i}"] for i in range(3)} == {parent_trace}
    others = [trace_of[f"{when}{i}"] for when in ("before", "after") for i in range(3)]
    assert len(set(others)) == 6 and parent_trace not in others
    assert all(f.exception(0) is None for f in (*before, *inside, *after))
