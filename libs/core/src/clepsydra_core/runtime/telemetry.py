"""OpenTelemetry set-up, once per process, and W3C trace context carried in message
properties (SPEC O1).

The exporter is chosen by a setting (``CLEPSYDRA_OTEL_EXPORTER``):

- ``none``: spans are created (trace ids exist, context propagates) but not exported; hot
  paths that would create one span per message ask :func:`exporting` and skip them;
- ``console``: printed to stdout;
- ``otlp``: OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the collector);
- ``memory``: kept in memory, for tests in the same process (:func:`memory_exporter`);
- ``file:<path>``: one JSON object per finished span appended to a file, so tests can read the
  spans of services running as separate processes.

Each process reports ``service.name`` ``clepsydra-<part>`` and ``service.version`` (its
distribution's version); ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` override them as
the OpenTelemetry SDK documents (``OTEL_SERVICE_NAME`` wins over a ``service.name`` in the
attributes).

The sampler, and the context-only spans made for what it does not record, are
clepsydra_core.runtime.lean_tracer's (re-exported here): by default parent-based, one new trace in a
hundred with ``otlp`` and ``none``, every one with the local exporters; ``OTEL_TRACES_SAMPLER``
wins.

A span that turned out to carry no message (an empty long-poll pull, a hand-over with nothing
due) is marked with :func:`mark_idle` and is not exported: an idle stack sends (almost) nothing.
The span attribute names live here, once (:data:`MESSAGING_SYSTEM` ...).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, MutableMapping, Sequence
from importlib import metadata

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from clepsydra_core import properties as P
from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import ANALYTICS_SERVICE as ANALYTICS_SERVICE
from clepsydra_core.naming import CLIENT_SERVICE as CLIENT_SERVICE
from clepsydra_core.naming import CONSOLE_SERVICE as CONSOLE_SERVICE
from clepsydra_core.naming import RETRY_SERVICE as RETRY_SERVICE
from clepsydra_core.naming import SCHEDULER_SERVICE as SCHEDULER_SERVICE
from clepsydra_core.naming import STORE_SERVICE as STORE_SERVICE
from clepsydra_core.runtime.lean_tracer import DEFAULT_RATIO as DEFAULT_RATIO
from clepsydra_core.runtime.lean_tracer import SAMPLER_ARG_VAR as SAMPLER_ARG_VAR
from clepsydra_core.runtime.lean_tracer import SAMPLER_VAR as SAMPLER_VAR
from clepsydra_core.runtime.lean_tracer import HandedSpan as HandedSpan
from clepsydra_core.runtime.lean_tracer import LeanTracer as LeanTracer
from clepsydra_core.runtime.lean_tracer import LeanTracerProvider as LeanTracerProvider
from clepsydra_core.runtime.lean_tracer import batch_contexts as batch_contexts
from clepsydra_core.runtime.lean_tracer import default_sampler as default_sampler
from clepsydra_core.runtime.lean_tracer import plain_traceparent as plain_traceparent
from clepsydra_core.runtime.lean_tracer import start_decided as start_decided
from clepsydra_core.runtime.lean_tracer import traceparent
from clepsydra_core.runtime.lean_tracer import unrecorded as unrecorded
from clepsydra_core.runtime.lean_tracer import unrecorded_w3c as unrecorded_w3c

# ---- span attributes: OpenTelemetry messaging conventions, then ours -------------------------
MESSAGING_SYSTEM = "messaging.system"
SYSTEM = "clepsydra"
"""The value of ``messaging.system`` on every messaging span."""
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
SEND, RECEIVE, PROCESS, SETTLE = "send", "receive", "process", "settle"
"""Values of ``messaging.operation.type``."""
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
DELAY_LEVEL = "clepsydra.delay_level"
RECONSUME_TIMES = "clepsydra.reconsume_times"
DLQ_REASON = "clepsydra.dlq_reason"
OUTCOME = "clepsydra.outcome"
STORED_TOPIC = "clepsydra.stored_topic"
"""Where a produced message was stored when not its destination (parked, rerouted)."""
NEW_MESSAGE_ID = "clepsydra.new_message.id"
LATENESS_MS = "clepsydra.lateness_ms"
UNIQ_KEY = "clepsydra.uniq_key"
QUEUE = "clepsydra.queue"
RESULT = "clepsydra.result"
FALLBACK = "clepsydra.fallback"
ORDERLY = "clepsydra.orderly"
DELIVERED = "clepsydra.delivered"
PARKED = "clepsydra.parked"
SKIPPED = "clepsydra.skipped"
FROM_OFFSET = "clepsydra.from_offset"
NEXT_OFFSET = "clepsydra.next_offset"
COUNT = "clepsydra.count"
IDLE = "clepsydra.idle"
"""Set (True) on a span that carried no message; such spans are not exported."""

_lock = threading.Lock()
_provider: TracerProvider | None = None
_exporting = False
_memory: InMemorySpanExporter | None = None
_TRACEPARENT = re.compile(
    r"[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*?)?[ \t]*")
"""A W3C ``traceparent``: version, trace id, parent id, flags (and more, after version 00)."""
class JsonLinesSpanExporter(SpanExporter):
    """Appends each span as one JSON line: name, trace/span/parent ids, links, attributes."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            if ctx is None:
                continue
            lines.append(json.dumps({
                "name": span.name,
                "service": span.resource.attributes.get("service.name"),
                "traceId": f"{ctx.trace_id:032x}",
                "spanId": f"{ctx.span_id:016x}",
                "parentSpanId": f"{span.parent.span_id:016x}" if span.parent else None,
                "links": [f"{link.context.trace_id:032x}" for link in span.links],
                "attributes": {k: v for k, v in (span.attributes or {}).items()
                               if isinstance(v, str | int | float | bool)},
                "start": span.start_time,
                "end": span.end_time,
            }))
        with self._lock, open(self._path, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class DropIdle(SpanProcessor):
    """Passes finished spans on to ``inner`` unless they are marked idle (:func:`mark_idle`)."""

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner = inner

    def on_start(self, span: trace.Span, parent_context: otel_context.Context | None = None
                 ) -> None:
        self._inner.on_start(span, parent_context)  # type: ignore[arg-type]

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes
        if attributes and attributes.get(IDLE):
            return
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def mark_idle(span: trace.Span) -> None:
    """The span carried no message: it is not exported (nor should its children be made)."""
    span.set_attribute(IDLE, True)


def service_resource(service_name: str) -> Resource:
    """``service.name`` and ``service.version`` of a process, with the standard environment
    variables over them: ``OTEL_RESOURCE_ATTRIBUTES``, then ``OTEL_SERVICE_NAME``."""
    try:
        version = metadata.version(service_name)
    except metadata.PackageNotFoundError:
        version = metadata.version("clepsydra-core")
    ours = Resource.create({"service.name": service_name, "service.version": version})
    return ours.merge(OTELResourceDetector().detect())


def _processor(exporter: str) -> SpanProcessor | None:
    global _memory
    if exporter == "none":
        return None
    if exporter == "console":
        return BatchSpanProcessor(ConsoleSpanExporter())
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return BatchSpanProcessor(OTLPSpanExporter())
    if exporter == "memory":
        _memory = InMemorySpanExporter()
        return SimpleSpanProcessor(_memory)
    if exporter.startswith("file:"):
        path = exporter[len("file:"):]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return SimpleSpanProcessor(JsonLinesSpanExporter(path))
    raise ConfigError(f"CLEPSYDRA_OTEL_EXPORTER={exporter!r} must be none, console, "
                      "otlp, memory or file:<path>")


def init_tracing(service_name: str, exporter: str = "none") -> TracerProvider:
    """Install the process's tracer provider (first call wins; later calls return it).
    ``service_name`` is one of the ``*_SERVICE`` names (also the distribution whose version
    is reported)."""
    global _provider, _exporting
    with _lock:
        if _provider is not None:
            return _provider
        processor = _processor(exporter)
        provider = LeanTracerProvider(resource=service_resource(service_name),
                                      sampler=default_sampler(exporter))
        if processor is not None:
            provider.add_span_processor(DropIdle(processor))
        trace.set_tracer_provider(provider)
        _provider = provider
        _exporting = exporter != "none"
        return provider


def reset_after_fork() -> None:
    """Forget the provider inherited from a parent process (call in a forked child before
    :func:`init_tracing`, e.g. Celery's ``worker_process_init``)."""
    global _provider, _memory, _exporting
    with _lock:
        _provider = None
        _memory = None
        _exporting = False
        # The OTel API lets a process set its global provider once; without this the child's
        # init_tracing would log "Overriding ... not allowed" and keep the parent's provider.
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


def memory_exporter() -> InMemorySpanExporter:
    """The in-memory exporter installed by ``init_tracing(..., "memory")``."""
    if _memory is None:
        raise RuntimeError("tracing was not initialised with the memory exporter")
    return _memory


def exporting() -> bool:
    """True when this process's spans go somewhere (any exporter but ``none``)."""
    return _exporting


def parent_sampled(traceparent: str | None) -> bool:
    """Whether a W3C ``traceparent`` carries the sampled flag (``...-01``). A child of an
    unsampled parent is dropped by the default parent-based sampler, so a hot path can skip
    creating it (and parsing the header) at all."""
    if not traceparent or len(traceparent) < 2:
        return False
    try:
        return bool(int(traceparent[-2:], 16) & 0x01)
    except ValueError:
        return False


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def inject(props: MutableMapping[str, str],
           span: trace.Span | None = None) -> MutableMapping[str, str]:
    """Write the W3C context (`traceparent`, `tracestate`) of ``span`` (default: the current
    one) into properties or headers: what the W3C propagator writes, without its generic
    carrier machinery."""
    if type(span) is HandedSpan:  # its traceparent as it was made (DEC-produce-span-handed)
        props[P.TRACEPARENT] = span.traceparent
        return props
    ctx = (trace.get_current_span() if span is None else span).get_span_context()
    if ctx.is_valid:
        props[P.TRACEPARENT] = traceparent(ctx.trace_id, ctx.span_id, ctx.trace_flags)
        if ctx.trace_state:
            props[P.TRACESTATE] = ctx.trace_state.to_header()
    return props


def remote_context(traceparent: str | None,
                   tracestate: str | None = None) -> otel_context.Context:
    """The context a W3C ``traceparent`` (and ``tracestate``) carries - header or message
    property -, or an empty context when it is missing or malformed: what the W3C propagator
    extracts, in half its time (it runs once per request and per consumed message)."""
    match = _TRACEPARENT.fullmatch(traceparent) if traceparent else None
    if match is None:
        return otel_context.Context()
    version, trace_hex, span_hex, flags, rest = match.groups()
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if version == "ff" or (version == "00" and rest) or not trace_id or not span_id:
        return otel_context.Context()
    state = trace.TraceState.from_header([tracestate]) if tracestate else None
    return trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
        trace_id, span_id, True, trace.TraceFlags(int(flags, 16)), state)),
        otel_context.Context())


def extract(props: Mapping[str, str]) -> otel_context.Context:
    """The context carried in a message's properties (empty context if none)."""
    return remote_context(props.get(P.TRACEPARENT), props.get(P.TRACESTATE))


def link_from(props: Mapping[str, str]) -> list[trace.Link]:
    """A span link to the producer's span carried in properties, or no link."""
    span_ctx = trace.get_current_span(extract(props)).get_span_context()
    return [trace.Link(span_ctx)] if span_ctx.is_valid else []

