"""One trace per message, from send to dead letter (SPEC O1), as a collector sees it:
the store, the retry service and the scheduler run as processes exporting OTLP/HTTP to a
receiver in this process, the producer and the push consumer run here and export there too.

- a message delayed, failing twice, then consumed: one tree, each hop a child of the one before
  (produce -> consume -> send-back -> retry -> consume ...), the hand-overs linked;
- a message that fails, is retried, fails again and is dead-lettered;
- an idle stack (a consumer long-polling, health checks, metrics scrapes, level polls)
  exports nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from clepsydra_client.admin import AdminClient
from clepsydra_client.consumer.listener import ConcurrentContext, ConsumeFromWhere, ConsumeResult
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.message import Message
from clepsydra_client.producer import Producer
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from tests.fixtures.otlp import ReceivedSpan
from tools.processes import wait_until

if TYPE_CHECKING:
    from tests.integration.retry.conftest import TracedStack

pytestmark = pytest.mark.integration

SERVICES = {"client": telemetry.CLIENT_SERVICE, "store": telemetry.STORE_SERVICE,
            "retry": telemetry.RETRY_SERVICE, "scheduler": telemetry.SCHEDULER_SERVICE}
"""Span name prefix -> the service.name of the process that makes it."""


@pytest.fixture
def client_provider(traced_stack: TracedStack,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[TracerProvider]:
    """This process's tracer provider, as the SDK installs it with CLEPSYDRA_OTEL_EXPORTER=otlp
    (the previous one is put back afterwards, so test order does not matter)."""
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", traced_stack.receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_always_on")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    telemetry.reset_after_fork()
    provider = telemetry.init_tracing(telemetry.CLIENT_SERVICE, "otlp")
    yield provider
    provider.shutdown()


class Tree:
    """The spans of one trace, by id and by parent."""

    def __init__(self, spans: list[ReceivedSpan], trace_id: str) -> None:
        self.spans = [s for s in spans if s.trace_id == trace_id]
        self.by_id = {s.span_id: s for s in self.spans}

    def children(self, parent: ReceivedSpan, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.parent_span_id == parent.span_id and s.name == name]

    def child(self, parent: ReceivedSpan, name: str) -> ReceivedSpan:
        found = self.children(parent, name)
        assert len(found) == 1, (f"{parent.name} {parent.span_id} has {len(found)} {name} "
                                 f"children:\n{self.render()}")
        return found[0]

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def render(self) -> str:
        """The tree as indented text (failure messages, docs/trace.txt)."""
        lines: list[str] = []

        def walk(span: ReceivedSpan, depth: int) -> None:
            attrs = span.attributes
            notes = [f"{label}={attrs[k]}" for label, k in (
                ("to", telemetry.DESTINATION), ("reconsume", telemetry.RECONSUME_TIMES),
                ("outcome", telemetry.OUTCOME), ("dlq_reason", telemetry.DLQ_REASON),
                ("result", telemetry.RESULT), ("stored", telemetry.STORED_TOPIC))
                if k in attrs]
            link = " (linked to store.handover)" if span.links else ""
            lines.append(f"{'  ' * depth}{span.name} [{span.service}] "
                         f"{' '.join(notes)}{link}".rstrip())
            for child in sorted((s for s in self.spans if s.parent_span_id == span.span_id),
                                key=lambda s: s.start_ns):
                walk(child, depth + 1)

        for root in (s for s in self.spans if s.parent_span_id not in self.by_id):
            walk(root, 0)
        return "\n".join(lines)


def assert_one_tree(tree: Tree) -> ReceivedSpan:
    """One root (the producer's span), every parent exported; the root."""
    roots = [s for s in tree.spans if s.parent_span_id is None]
    assert [r.name for r in roots] == ["client.produce"], tree.render()
    missing = [s for s in tree.spans if s.parent_span_id and s.parent_span_id not in tree.by_id]
    assert not missing, f"parents not exported: {[s.name for s in missing]}\n{tree.render()}"
    for span in tree.spans:
        assert span.service == SERVICES[span.name.partition(".")[0]], span
        assert span.resource.get("service.version"), span.resource
    return roots[0]


def assert_linked_to_handover(deliver: ReceivedSpan, spans: list[ReceivedSpan]) -> None:
    """A ``store.deliver`` span links to the store's hand-over span, itself a child of the
    scheduler's ``scheduler.deliver`` span, both exported (the batch's own trace)."""
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    assert len(deliver.links) == 1, deliver
    handover = by_id.get(deliver.links[0])
    assert handover is not None and handover.name == "store.handover", deliver.links
    scheduler = by_id.get((handover.trace_id, handover.parent_span_id or ""))
    assert scheduler is not None and scheduler.name == "scheduler.deliver", handover
    assert scheduler.service == telemetry.SCHEDULER_SERVICE


def trace_of(spans: list[ReceivedSpan], msg_id: str) -> str | None:
    """The trace id of the ``client.produce`` span that sent message ``msg_id``."""
    for span in spans:
        if span.name == "client.produce" and span.attributes.get(telemetry.MESSAGE_ID) == msg_id:
            return span.trace_id
    return None


def messaging(span: ReceivedSpan, operation: str) -> None:
    assert span.attributes[telemetry.MESSAGING_SYSTEM] == telemetry.SYSTEM, span
    assert span.attributes[telemetry.OPERATION_TYPE] == operation, span


def test_an_idle_stack_exports_nothing(traced_stack: TracedStack, client_provider: TracerProvider,
                                       names: Callable[[str], str]) -> None:
    """A consumer long-polling empty queues, health checks, metrics scrapes, the level table:
    no span. Then one message: its spans, and the pull that fetched it, are all that arrives."""
    store, retry = traced_stack.store.url, traced_stack.retry.url
    group, topic = names("G"), names("T")
    AdminClient(store, retry).create_topic(topic, 2)  # an admin write: traced
    wait_until(lambda: any(s.name == "store.create_topic" for s in traced_stack.receiver.spans()),
               30, 0.05, what="the topic's creation exported")
    before = len(traced_stack.receiver.spans())
    consumed = threading.Event()
    consumer = PushConsumer(group, store, retry, consume_from_where=ConsumeFromWhere.FIRST,
                            heartbeat_interval_s=0.2, persist_interval_s=0.2,
                            pull_idle_max_s=0.05).subscribe(topic)
    consumer.register_concurrent(lambda msgs, ctx: consumed.set())  # type: ignore[arg-type,return-value]
    consumer.start()
    try:
        wait_until(lambda: len(consumer.owned_queues()) >= 2, 30, 0.05, what="queues owned")
        with requests.Session() as http:
            for _ in range(3):
                for path in ("/healthz", "/metrics", "/openapi.json"):
                    assert http.get(store + path).status_code == 200
                    assert http.get(retry + path).status_code == 200
                assert http.get(store + "/v1/schedule/levels").status_code == 200
                assert http.get(f"{store}/v1/topics/{topic}/queues/0/messages").ok
        with Producer(store) as producer:
            marker = producer.send(topic, "marker")
        wait_until(consumed.is_set, 30, 0.05, what="marker consumed")
    finally:
        consumer.shutdown()
    client_provider.force_flush()

    def marker_consumed() -> bool:
        spans = traced_stack.receiver.spans()
        trace_id = trace_of(spans, marker.msg_id)
        return (any(s.name == "client.consume" and s.trace_id == trace_id for s in spans)
                and any(s.name == "store.pull" for s in spans[before:]))

    wait_until(marker_consumed, 30, 0.05, what="the marker's spans")
    spans = traced_stack.receiver.spans()
    marker_trace = trace_of(spans, marker.msg_id)
    others = [(s.service, s.name, s.attributes.get(telemetry.BATCH_COUNT))
              for s in spans[before:] if s.trace_id != marker_trace]
    assert others == [(telemetry.STORE_SERVICE, "store.pull", 1)]


def test_one_trace_per_message_from_send_to_dead_letter(
        traced_stack: TracedStack, client_provider: TracerProvider,
        names: Callable[[str], str]) -> None:
    store, retry = traced_stack.store.url, traced_stack.retry.url
    group, topic = names("G"), names("T")
    admin = AdminClient(store, retry)
    admin.create_topic(topic, 1)
    assert requests.put(f"{retry}/v1/groups/{group}", json={}, timeout=10).status_code == 201

    def listener(messages: list[Message], context: ConcurrentContext) -> ConsumeResult:
        m = messages[0]
        if m.text == "delayed" and m.reconsume_times >= 2:
            return ConsumeResult.SUCCESS
        if m.text == "doomed" and m.reconsume_times >= 1:
            context.delay_level_when_next_consume = -1  # R11: straight to the DLQ
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer(group, store, retry, consume_from_where=ConsumeFromWhere.FIRST,
                            heartbeat_interval_s=0.2, persist_interval_s=0.2,
                            pull_idle_max_s=0.05).subscribe(topic)
    consumer.register_concurrent(listener)
    consumer.start()
    try:
        with Producer(store) as producer:
            delayed = producer.send(topic, "delayed", delay_level=1)
            doomed = producer.send(topic, "doomed")

        def complete() -> bool:
            client_provider.force_flush()
            spans = traced_stack.receiver.spans()
            done = [s for s in spans if s.trace_id == trace_of(spans, delayed.msg_id)
                    and s.name == "client.consume"
                    and s.attributes.get(telemetry.RESULT) == "SUCCESS"]
            dead = [s for s in spans if s.trace_id == trace_of(spans, doomed.msg_id)
                    and s.name == "store.copy"
                    and s.attributes.get(telemetry.DESTINATION) == naming.dlq_topic(group)]
            return bool(done and dead)

        wait_until(complete, 90, 0.2, what="both messages' traces complete")
    finally:
        consumer.shutdown()
    # every process exports in batches: the tree is complete once each hop's span arrived
    deadline = time.monotonic() + 30
    while True:
        client_provider.force_flush()
        spans = traced_stack.receiver.spans()
        try:
            delayed_trace, doomed_trace, tree = _assert_trees(spans, delayed.msg_id,
                                                              doomed.msg_id, group, admin)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)

    resources = {s.service: s.resource for s in spans}
    for service in (telemetry.STORE_SERVICE, telemetry.RETRY_SERVICE,
                    telemetry.SCHEDULER_SERVICE):
        assert resources[service]["deployment.environment.name"] == "trace-test"

    out = os.environ.get("CLEPSYDRA_TRACE_OUT")
    if out:  # the README's picture: CLEPSYDRA_TRACE_OUT=docs/trace pytest ...

        def short(text: str) -> str:  # the test's topic and group names as T and G
            return text.replace(topic, "T").replace(group, "G")

        Path(out + ".txt").write_text(short(
            "# delayed, fails twice, then consumed\n"
            + Tree(spans, delayed_trace).render()
            + "\n\n# fails, retried, fails again, dead-lettered\n" + tree.render() + "\n"))
        # both traces' spans as the file exporter writes them: python -m tools.trace_picture
        Path(out + ".jsonl").write_text(short("".join(
            json.dumps(file_record(s)) + "\n" for s in spans
            if s.trace_id in (delayed_trace, doomed_trace))))


def _assert_trees(spans: list[ReceivedSpan], delayed_id: str, doomed_id: str, group: str,
                  admin: AdminClient) -> tuple[str, str, Tree]:
    """The two messages' trees as SPEC O1 wants them; (delayed trace, doomed trace, the
    doomed tree)."""
    delayed_trace, doomed_trace = trace_of(spans, delayed_id), trace_of(spans, doomed_id)
    assert delayed_trace and doomed_trace and delayed_trace != doomed_trace

    # ---- delayed, fails twice, then consumed --------------------------------------------
    tree = Tree(spans, delayed_trace)
    produce = assert_one_tree(tree)
    messaging(produce, telemetry.SEND)
    assert produce.attributes[telemetry.DELAY_LEVEL] == 1
    parked = tree.child(produce, "store.produce")
    messaging(parked, telemetry.SEND)
    assert parked.attributes[telemetry.STORED_TOPIC] == naming.SCHEDULE_TOPIC
    deliver = tree.child(produce, "store.deliver")
    assert_linked_to_handover(deliver, spans)
    hop = produce
    for attempt in range(3):
        consume = tree.child(hop, "client.consume")
        messaging(consume, telemetry.PROCESS)
        assert consume.attributes[telemetry.RECONSUME_TIMES] == attempt
        assert consume.attributes[telemetry.CONSUMER_GROUP] == group
        if attempt == 2:
            assert consume.attributes[telemetry.RESULT] == "SUCCESS"
            assert tree.children(consume, "client.send_back") == []
            break
        assert consume.attributes[telemetry.RESULT] == "RECONSUME_LATER"
        settle = tree.child(consume, "client.send_back")
        messaging(settle, telemetry.SETTLE)
        send_back = tree.child(settle, "retry.send_back")  # the failed attempt's child
        messaging(send_back, telemetry.SETTLE)
        assert send_back.attributes[telemetry.OUTCOME] == "RETRY"
        assert send_back.attributes[telemetry.RECONSUME_TIMES] == attempt + 1
        assert send_back.links == ()  # the same trace as the message: no link needed
        copy = tree.child(send_back, "store.copy")
        assert copy.attributes[telemetry.DESTINATION] == naming.retry_topic(group)
        assert copy.attributes[telemetry.STORED_TOPIC] == naming.SCHEDULE_TOPIC
        assert_linked_to_handover(tree.child(send_back, "store.deliver"), spans)
        hop = send_back

    # ---- fails, is retried, fails again, dead-lettered ----------------------------------
    tree = Tree(spans, doomed_trace)
    produce = assert_one_tree(tree)
    first = tree.child(produce, "client.consume")
    retried = tree.child(tree.child(first, "client.send_back"), "retry.send_back")
    assert retried.attributes[telemetry.OUTCOME] == "RETRY"
    second = tree.child(retried, "client.consume")
    assert second.attributes[telemetry.RECONSUME_TIMES] == 1
    dead = tree.child(tree.child(second, "client.send_back"), "retry.send_back")
    assert dead.attributes[telemetry.OUTCOME] == "DLQ"
    assert dead.attributes[telemetry.DLQ_REASON] == "level_negative"
    copy = tree.child(dead, "store.copy")
    assert copy.attributes[telemetry.DESTINATION] == naming.dlq_topic(group)
    assert copy.attributes[telemetry.DLQ_REASON] == "level_negative"
    stored = admin_dlq_message(admin, group)
    assert stored.get(P.TRACEPARENT, "").split("-")[1] == doomed_trace
    return delayed_trace, doomed_trace, tree


def file_record(span: ReceivedSpan) -> dict[str, object]:
    """A received span in the JSON-lines format of CLEPSYDRA_OTEL_EXPORTER=file:<path>
    (clepsydra_core.runtime.telemetry.JsonLinesSpanExporter), which tools/trace_picture.py reads."""
    return {"name": span.name, "service": span.service, "traceId": span.trace_id,
            "spanId": span.span_id, "parentSpanId": span.parent_span_id,
            "links": [trace_id for trace_id, _ in span.links], "attributes": span.attributes,
            "start": span.start_ns, "end": span.end_ns}


def admin_dlq_message(admin: AdminClient, group: str) -> dict[str, str]:
    """The properties of the one message in the group's DLQ."""
    pulled = admin.store.get(admin.store.path("/v1/topics/{}/queues/0/messages",
                                            naming.dlq_topic(group)))
    messages = pulled["messages"]
    assert len(messages) == 1, messages
    props: dict[str, str] = messages[0]["properties"]
    return props
