"""Context-only spans for what will not be recorded, and the sampler that decides
(DEC-unrecorded-spans; re-exported by clepsydra_core.runtime.telemetry, which installs them).

The sampler is ``OTEL_TRACES_SAMPLER`` (and ``OTEL_TRACES_SAMPLER_ARG``) when set; otherwise
(:func:`default_sampler`) parent-based, with one new trace in a hundred for ``otlp`` (the
exporter of production: :data:`DEFAULT_RATIO` keeps exporting under 5 % of the produce rate)
and ``none``, and every trace for the local exporters (``console``, ``memory``, ``file:``). The
decision is made once, where a trace starts (the producer's span), and travels in
``traceparent``'s flags: a sampled message is traced in every hop, an unsampled one in none.
A span that will not be recorded (an unsampled parent, a new trace sampled away, or no
exporter) is a context-only span (:class:`LeanTracer`): no SDK span, no attributes; hot paths
ask :func:`unrecorded` (or :func:`batch_contexts`) before building attributes.
"""

from __future__ import annotations

import os
import random
import re
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.util._decorator import _agnosticcontextmanager

_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_UNSAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)

_NO_TRACE, _NO_SPAN = "0" * 32, "0" * 16
"""The invalid (all-zero) trace and span ids."""

DEFAULT_RATIO = 0.01
"""The share of new traces sampled by default with the ``otlp`` exporter (one in a hundred)."""
SAMPLER_VAR = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_VAR = "OTEL_TRACES_SAMPLER_ARG"


class LeanTracer(trace.Tracer):
    """The SDK's tracer for spans that will be recorded; a context-only span for those that
    will not: while the provider has nowhere to send spans (exporter ``none``), and for a child
    of an unsampled parent under a parent-based sampler (the SDK would drop it too). A
    context-only span is a non-recording one with a fresh span id in its parent's trace (a new
    trace id when there is none) and its parent's flags: trace context still flows -
    ``traceparent`` in message properties and headers, the sampled decision in its flags, trace
    ids in log lines - at a few microseconds instead of the SDK span's tens (DEC-unrecorded-spans:
    tracing without an exporter costs < 1 %, unsampled messages almost nothing)."""

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

    def unrecorded_w3c(self, parent: str | None) -> trace.Span | None:
        """:meth:`unrecorded` for a parent given as a :func:`plain_traceparent` (None: a new
        trace), the same decision: a :class:`HandedSpan`, its ``traceparent`` made from the
        parent's without parsing its ids; None when the span may be recorded (start it from
        the parent's context as usual)."""
        provider = self._provider
        if parent is not None:
            flags = parent[53:]
            if provider.records and (int(flags, 16) & 1 or not provider.follows_parent):
                return None
            return HandedSpan(f"{parent[:36]}{random.getrandbits(64) or 1:016x}-{flags}")
        if provider.records and (not provider.root_known or provider.ids.pending()):
            return None
        ids = f"{random.getrandbits(192):048x}"
        trace_hex, span_hex = ids[:32], ids[32:]
        if trace_hex == _NO_TRACE or span_hex == _NO_SPAN:  # the one invalid id: draw again
            return self.unrecorded(otel_context.Context())
        sampled = provider.root_sampled_hex(trace_hex)
        if provider.records:
            if sampled:  # the SDK span takes this trace id, and samples it again alike
                provider.ids.take_next(int(trace_hex, 16))
                return None
            return HandedSpan(f"00-{trace_hex}-{span_hex}-00")
        return HandedSpan(f"00-{trace_hex}-{span_hex}-{'01' if sampled else '00'}")

    def batch_contexts(self, count: int) -> list[str | int | None]:
        """For ``count`` messages, each its own span in the current context: the
        ``traceparent`` of a context-only span where it would not be recorded; the trace id
        of a new trace that is sampled (start its span with :func:`start_decided`); None where
        the SDK decides (start its span as usual). Ids are drawn at once: a fraction of what
        one :meth:`unrecorded` each costs (a batch's messages)."""
        provider = self._provider
        parent = trace.get_current_span().get_span_context()
        if parent.is_valid:
            if parent.trace_state or (provider.records and (
                    parent.trace_flags.sampled or not provider.follows_parent)):
                return [None] * count  # recorded, or a trace state to carry: the span's way
            head, tail = f"00-{parent.trace_id:032x}-", f"-{parent.trace_flags:02x}"
            ids = f"{random.getrandbits(64 * count):0{16 * count}x}"
            return [head + (ids[i:i + 16] if ids[i:i + 16] != _NO_SPAN else "0" * 15 + "1")
                    + tail for i in range(0, 16 * count, 16)]
        if provider.records and (not provider.root_known or provider.ids.pending()):
            return [None] * count
        ids = f"{random.getrandbits(192 * count):0{48 * count}x}"
        out: list[str | int | None] = []
        for i in range(0, 48 * count, 48):
            trace_hex, span_hex = ids[i:i + 32], ids[i + 32:i + 48]
            if trace_hex == _NO_TRACE or span_hex == _NO_SPAN:  # the one invalid id
                out.append(None)
                continue
            sampled = provider.root_sampled_hex(trace_hex)
            if sampled and provider.records:
                out.append(int(trace_hex, 16))
            else:
                out.append(f"00-{trace_hex}-{span_hex}-{'01' if sampled else '00'}")
        return out

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


_PLAIN = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
"""A W3C ``traceparent`` of version 00, nothing around or after it, its ids not zero."""


def plain_traceparent(value: object) -> bool:
    """Whether ``value`` is a ``traceparent`` :meth:`LeanTracer.unrecorded_w3c` takes as it is
    (any other is parsed into a context first, as the W3C propagator reads it)."""
    return type(value) is str and _PLAIN.fullmatch(value) is not None


class HandedSpan(trace.NonRecordingSpan):
    """A context-only span made and kept as its W3C ``traceparent`` (DEC-produce-span-handed):
    a message carries that string as it is; its ids are parsed only when asked for
    (``get_span_context``: a log line's trace id)."""

    def __init__(self, traceparent: str) -> None:  # (no context yet: made when asked for)
        self.traceparent = traceparent

    def get_span_context(self) -> trace.SpanContext:
        context: trace.SpanContext | None = self.__dict__.get("_context")
        if context is None:
            _, trace_hex, span_hex, flags = self.traceparent.split("-")
            context = self._context = trace.SpanContext(
                int(trace_hex, 16), int(span_hex, 16), False, trace.TraceFlags(int(flags, 16)))
        return context

    def __repr__(self) -> str:
        return f"HandedSpan({self.traceparent!r})"


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

    def root_sampled_hex(self, trace_hex: str) -> bool:
        """:meth:`root_sampled` of a trace id in hex (a ratio reads its low 64 bits only)."""
        if self._ratio is not None:
            return int(trace_hex[16:], 16) < self._ratio.bound
        return self.root_sampled(int(trace_hex, 16))

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


def unrecorded_w3c(tracer: trace.Tracer, parent: str | None) -> trace.Span | None:
    """:meth:`LeanTracer.unrecorded_w3c` (None for another tracer: start the span)."""
    if isinstance(tracer, LeanTracer):
        return tracer.unrecorded_w3c(parent)
    return None


def batch_contexts(tracer: trace.Tracer, count: int) -> list[str | int | None]:
    """:meth:`LeanTracer.batch_contexts` (all None for another tracer: start the spans)."""
    if not isinstance(tracer, LeanTracer):
        return [None] * count
    return tracer.batch_contexts(count)


def start_decided(tracer: trace.Tracer, trace_id: int, name: str,
                  **kwargs: Any) -> trace.Span:
    """Start the span of a new trace whose sampling :func:`batch_contexts` decided (sampled),
    with that trace id."""
    if isinstance(tracer, LeanTracer):
        tracer._provider.ids.take_next(trace_id)
    return tracer.start_span(name, **kwargs)


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The W3C ``traceparent`` value (version 00)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
