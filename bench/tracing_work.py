"""The tracing work of one message, alone (DEC-hand-made-spans; used by bench/tracing.py): the
SDK's real produce and consume code with the HTTP round trip replaced by the store's request
tracing in this process, so that only the tracing calls differ between modes. CPU time of this
process (exporter thread included), the least of a few repeats: unlike a rate, it barely moves
with a shared machine's load, so it shows a 1 % cost that the end-to-end rates cannot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from opentelemetry import trace

from clepsydra_client.consumer.consume_service import ConsumeService
from clepsydra_client.message import Message
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.http import HttpClient
from clepsydra_web.tracing import ServerTracing

BODY = "x" * 100
TOPIC = "bench"


class StoreInProcess(HttpClient):
    """The produce routes' tracing, as the store does it, instead of a store: a span from the
    request's ``traceparent``, its context for messages that carry none, its attributes -
    under a tracer provider of its own, the store's (``exporter``: the store's setting)."""

    def __init__(self, exporter: str) -> None:
        super().__init__("http://in-process", service="store")
        self.provider = telemetry.LeanTracerProvider(
            telemetry.service_resource(telemetry.STORE_SERVICE),
            telemetry.default_sampler(exporter))
        processor = telemetry._processor(exporter)
        if processor is not None:
            self.provider.add_span_processor(telemetry.DropIdle(processor))
        self.server = ServerTracing("store")
        self.server.tracer = self.provider.get_tracer("clepsydra_store")
        self.carried: list[dict[str, str]] = []

    def request_status(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                       json: Any = None, timeout_s: float | None = None,
                       headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        sent: dict[str, str] = {}
        telemetry.inject(sent)  # as HttpClient does
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path}
        if P.TRACEPARENT in sent:
            environ["HTTP_TRACEPARENT"] = sent[P.TRACEPARENT]
        batch = path.endswith("/batch")
        messages = json["messages"] if batch else [json]
        scope = self.server.begin("produce_batch" if batch else "produce", environ)
        own = telemetry.inject({})
        results = []
        for i, message in enumerate(messages):
            props = message["properties"]
            if P.TRACEPARENT not in props:
                props.update(own)
            self.carried.append(props)
            results.append({"msgId": f"{i:032X}", "topic": TOPIC, "queueId": 0,
                            "queueOffset": i})
        if scope.span.is_recording():
            scope.span.set_attribute(telemetry.DESTINATION, TOPIC)
        self.server.end(scope, 201)
        return 201, ({"results": results} if batch else results[0])


def cpu_us_per(work: Callable[[], int], repeats: int, store: StoreInProcess) -> float:
    """The least CPU microseconds per message of ``work`` (which returns its message count),
    the spans' export included."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        count = work()
        provider = trace.get_tracer_provider()
        if hasattr(provider, "force_flush"):
            provider.force_flush()
        store.provider.force_flush()
        best = min(best, (time.process_time() - start) * 1e6 / count)
    return best


def measure(messages: int, store_exporter: str, repeats: int = 5) -> dict[str, float]:
    """µs of tracing-bearing work per message under the current provider (the client's) and
    a store's with ``store_exporter``: ``single`` (Producer.send), ``batch`` (send_batch of
    100), ``drain`` (a listener call's span, for messages as the store stored them)."""
    store = StoreInProcess(store_exporter)
    try:
        return _measure(messages, store, repeats)
    finally:
        store.provider.shutdown()


def _measure(messages: int, store: StoreInProcess, repeats: int) -> dict[str, float]:
    producer = Producer("http://in-process", http=store)
    chunk = [OutgoingMessage(BODY) for _ in range(100)]

    def single() -> int:
        for _ in range(messages):
            producer.send(TOPIC, BODY)
        return messages

    def batch() -> int:
        for _ in range(messages // 100):
            producer.send_batch(TOPIC, chunk)
        return messages // 100 * 100

    store.carried.clear()
    single()  # the messages the consumer will take, with the trace context they carry
    consumed = [Message.from_json({"msgId": f"{i:032X}", "topic": TOPIC, "queueId": 0,
                                   "queueOffset": i, "body": BODY, "properties": props})
                for i, props in enumerate(store.carried[:messages])]
    service = ConsumeService.__new__(ConsumeService)  # only its span: no pool, no pulls
    service.settings = SimpleNamespace(group="G", client_id="bench")  # type: ignore[assignment]
    service._tracer = telemetry.tracer("clepsydra_client")
    queue = SimpleNamespace(queue="bench@0")

    def drain() -> int:
        for message in consumed:
            with service._span(queue, [message]) as span:  # type: ignore[arg-type]
                span.set_attribute(telemetry.RESULT, "SUCCESS")
        return len(consumed)

    return {"single": cpu_us_per(single, repeats, store),
            "batch": cpu_us_per(batch, repeats, store),
            "drain": cpu_us_per(drain, repeats, store)}
