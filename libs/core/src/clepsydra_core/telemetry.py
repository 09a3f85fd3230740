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

The sampler is ``OTEL_TRACES_SAMPLER`` (and ``OTEL_TRACES_SAMPLER_ARG``) when set; otherwise
(:func:`default_sampler`) parent-based, with one new trace in a hundred for ``otlp`` (the
exporter of production: :data:`DEFAULT_RATIO` keeps exporting under 5 % of the produce rate,
issue 19) and ``none``, and every trace for the local exporters (``console``, ``memory``,
``file:``). The decision is made once, where a trace starts (the producer's span), and travels in
``traceparent``'s flags: a sampled message is traced in every hop, an unsampled one in none. A
span that will not be recorded (an unsampled parent, or no exporter) is a context-only span
(:class:`LeanTracer`); hot paths ask :func:`unrecorded` before building attributes.

A span that turned out to carry no message (an empty long-poll pull, a hand-over with nothing
due) is marked with :func:`mark_idle` and is not exported: an idle stack sends (almost) nothing.
The span attribute names live here, once (:data:`MESSAGING_SYSTEM` ...).
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from importlib import metadata
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.util._decorator import _agnosticcontextmanager
from opentelemetry.util._once import Once

from clepsydra_core import properties as P
from clepsydra_core.errors import ConfigError

# ---- service names (resource ``service.name``) ------------------------------------------------
STORE_SERVICE = "clepsydra-store"
SCHEDULER_SERVICE = "clepsydra-scheduler"
RETRY_SERVICE = "clepsydra-retry"
CLIENT_SERVICE = "clepsydra-client"
ANALYTICS_SERVICE = "clepsydra-analytics"

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
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_UNSAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)

DEFAULT_RATIO = 0.01
"""The share of new traces sampled by default with the ``otlp`` exporter (one in a hundred)."""
SAMPLER_VAR = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_VAR = "OTEL_TRACES_SAMPLER_ARG"


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


class LeanTracer(trace.Tracer):
    """The SDK's tracer for spans that will be recorded; a context-only span for those that
    will not: while the provider has nowhere to send spans (exporter ``none``), and for a child
    of an unsampled parent under a parent-based sampler (the SDK would drop it too). A
    context-only span is a non-recording one with a fresh span id in its parent's trace (a new
    trace id when there is none) and its parent's flags: trace context still flows -
    ``traceparent`` in message properties and headers, the sampled decision in its flags, trace
    ids in log lines - at a few microseconds instead of the SDK span's tens (issue 19: tracing
    without an exporter costs < 1 %, unsampled messages almost nothing)."""

    def __init__(self, sdk: trace.Tracer, provider: LeanTracerProvider) -> None:
        self._sdk = sdk
        self._provider = provider

    def unrecorded(self, context: otel_context.Context | None = None) -> trace.Span | None:
        """The context-only span to use when a span started in ``context`` (default: the
        current one) would not be recorded; None when it may be (the SDK's span)."""
        ids = self.unrecorded_ids(context)
        if ids is None:
            return None
        trace_id, span_id, flags, state = ids
        return trace.NonRecordingSpan(trace.SpanContext(trace_id, span_id, False, flags, state))

    def unrecorded_ids(self, context: otel_context.Context | None = None
                       ) -> tuple[int, int, trace.TraceFlags, trace.TraceState | None] | None:
        """(trace id, span id, flags, trace state) of :meth:`unrecorded`'s span, without
        making it; None when a span would be recorded."""
        provider = self._provider
        parent = trace.get_current_span(context).get_span_context()
        if parent.is_valid:
            if provider.records and (parent.trace_flags.sampled or not provider.follows_parent):
                return None
            return (parent.trace_id, random.getrandbits(64) or 1, parent.trace_flags,
                    parent.trace_state)
        if provider.records and (not provider.root_known or provider.ids.pending()):
            # the sampler decides on more than the trace id (the SDK asks it), or a sampled
            # new trace was decided already (unrecorded() asked before start_span)
            return None
        trace_id = random.getrandbits(128) or 1
        sampled = provider.root_sampled(trace_id)
        if provider.records:
            if sampled:  # the SDK span takes this trace id, and samples it again alike
                provider.ids.take_next(trace_id)
                return None
            flags = _UNSAMPLED
        else:
            flags = _SAMPLED if sampled else _UNSAMPLED
        return trace_id, random.getrandbits(64) or 1, flags, None

    def start_span(self, name: str, context: otel_context.Context | None = None,
                   kind: trace.SpanKind = trace.SpanKind.INTERNAL,
                   attributes: Any = None, links: Any = None, start_time: int | None = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> trace.Span:
        lean = self.unrecorded(context)
        if lean is not None:
            return lean
        return self._sdk.start_span(name, context, kind, attributes, links, start_time,
                                    record_exception, set_status_on_exception)

    @_agnosticcontextmanager
    def start_as_current_span(self, name: str, context: otel_context.Context | None = None,
                              kind: trace.SpanKind = trace.SpanKind.INTERNAL,
                              attributes: Any = None, links: Any = None,
                              start_time: int | None = None, record_exception: bool = True,
                              set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class DecidedIds(RandomIdGenerator):
    """Random ids, but the next trace id of a thread can be set beforehand: the one whose
    sampling :class:`LeanTracer` already decided. (A dict by thread id, not a thread-local:
    asking an empty one is a few times cheaper, and it is asked once per new trace.)"""

    def __init__(self) -> None:
        self._next: dict[int, int] = {}

    def take_next(self, trace_id: int) -> None:
        self._next[threading.get_ident()] = trace_id

    def pending(self) -> bool:
        """A trace id was set in this thread and not taken yet."""
        return bool(self._next) and threading.get_ident() in self._next

    def generate_trace_id(self) -> int:
        if self._next:
            trace_id = self._next.pop(threading.get_ident(), 0)
            if trace_id:
                return trace_id
        return super().generate_trace_id()


class LeanTracerProvider(TracerProvider):
    """The SDK provider whose tracers are :class:`LeanTracer`: real spans once a span
    processor is added (an exporter, or a test's in-memory one), and then only for sampled
    traces; context-only ones otherwise."""

    records = False
    follows_parent = False
    """The sampler drops every child of an unsampled parent (parent-based with the default
    delegates): such a child is made context-only without asking it."""
    root_known = False
    """The sampler decides a new trace on its trace id alone (ratio, always on or off)."""

    def __init__(self, resource: Resource, sampler: sampling.Sampler) -> None:
        self.ids = DecidedIds()
        super().__init__(resource=resource, sampler=sampler, id_generator=self.ids)
        self.follows_parent = follows_parent(sampler)
        # the SDK keeps a parent-based sampler's delegates private; unknown: ask the sampler
        root = getattr(sampler, "_root", sampler) if isinstance(sampler, sampling.ParentBased) \
            else sampler
        self._root: sampling.Sampler = root
        self._ratio = root if isinstance(root, sampling.TraceIdRatioBased) else None
        self._static: bool | None = {id(sampling.ALWAYS_ON): True,
                                     id(sampling.ALWAYS_OFF): False}.get(id(root))
        self.root_known = self._ratio is not None or self._static is not None

    def root_sampled(self, trace_id: int) -> bool:
        """The sampler's decision for a new trace ``trace_id``."""
        if self._ratio is not None:
            return trace_id & self._ratio.TRACE_ID_LIMIT < self._ratio.bound
        if self._static is not None:
            return self._static
        decision = self._root.should_sample(None, trace_id, "").decision
        return decision is sampling.Decision.RECORD_AND_SAMPLE

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return LeanTracer(super().get_tracer(*args, **kwargs), self)

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self.records = True


def follows_parent(sampler: sampling.Sampler) -> bool:
    """Whether ``sampler`` drops every child of an unsampled parent, local or remote."""
    return (isinstance(sampler, sampling.ParentBased)
            and getattr(sampler, "_remote_parent_not_sampled", None) is sampling.ALWAYS_OFF
            and getattr(sampler, "_local_parent_not_sampled", None) is sampling.ALWAYS_OFF)


def default_sampler(exporter: str) -> sampling.Sampler:
    """``OTEL_TRACES_SAMPLER`` (with ``OTEL_TRACES_SAMPLER_ARG``) when set, as the SDK reads
    it; else parent-based: :data:`DEFAULT_RATIO` of new traces with ``otlp`` (and ``none``,
    whose decision still travels to processes that export), all of them with the local
    exporters (``console``, ``memory``, ``file:``: for reading a process's own spans)."""
    if os.environ.get(SAMPLER_VAR):
        return sampling._get_from_env_or_default()
    if exporter in ("otlp", "none"):
        return sampling.ParentBasedTraceIdRatio(DEFAULT_RATIO)
    return sampling.ParentBased(sampling.ALWAYS_ON)


def unrecorded(tracer: trace.Tracer, context: otel_context.Context | None = None
               ) -> trace.Span | None:
    """The context-only span to use instead when a span started by ``tracer`` in ``context``
    would not be recorded; None when it may be (then build its attributes and start it). A hot
    path builds nothing for a span nobody will see."""
    if isinstance(tracer, LeanTracer):
        return tracer.unrecorded(context)
    return None


def unrecorded_traceparent(tracer: trace.Tracer,
                           context: otel_context.Context | None = None) -> str | None:
    """The ``traceparent`` of :func:`unrecorded`'s span, without making the span (a batch's
    messages, one context each); None when a span would be recorded, or has no context."""
    if not isinstance(tracer, LeanTracer):
        return None
    ids = tracer.unrecorded_ids(context)
    if ids is None or ids[3]:  # a trace state to carry too: the span's inject() does it
        return None
    return traceparent(ids[0], ids[1], ids[2])


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The W3C ``traceparent`` value (version 00)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


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


def trace_id_of(props: Mapping[str, str]) -> str | None:
    """The 32-hex trace id in a message's `traceparent`, or None."""
    parts = props.get(P.TRACEPARENT, "").split("-")
    return parts[1] if len(parts) >= 4 else None
