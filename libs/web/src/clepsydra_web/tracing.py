"""Server spans, the same way in every HTTP service (SPEC O1): each request is one span
``<service>.<operation>``, a child of the caller's W3C ``traceparent`` header when it sends
one, current while the view runs (so the service's own calls carry it on,
clepsydra_core.runtime.http).

Spans are started by hand (two calls per request) rather than by
opentelemetry-instrumentation-flask, whose middleware costs several times more per request on
the produce path (docs/performance.md, DEC-hand-made-spans).

What makes no span, so that an idle stack exports (almost) nothing:

- ``untraced`` endpoints: the ops routes (``/healthz``, ``/metrics``, ``/openapi.json``) and any
  a service adds (the store's ``/v1/schedule/levels``);
- ``in_trace_only`` endpoints: polls traced only when the caller is inside a trace (the store's
  schedule entries, read by the scheduler between hand-overs);
- a view that says it carried nothing (:func:`idle`: an empty long-poll pull) - its span is
  made but not exported (clepsydra_core.runtime.telemetry.DropIdle);
- ``self_traced`` endpoints start their own spans (one per message, or a parent taken from a
  message's properties).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, g, request
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry

OPS_ENDPOINTS = frozenset({"ops.healthz", "ops.metrics", "ops.openapi"})
"""The routes of clepsydra_web.ops: never traced."""

_SCOPE = "clepsydra_scope"
_STATUS = "clepsydra_status"


@dataclass(slots=True)
class ServerScope:
    """One request: its operation, its span (non-recording when untraced), the context token
    that made it current (None when untraced), its start time."""

    operation: str
    span: trace.Span
    token: object
    started: float


def _callers(environ: Mapping[str, Any], props: Mapping[str, str] | None
             ) -> tuple[Any, Any] | None:
    """(``traceparent``, ``tracestate``) of the caller: the headers, else a single message's
    properties; None when neither has a ``traceparent``."""
    header = environ.get("HTTP_TRACEPARENT")
    if header:
        return header, environ.get("HTTP_TRACESTATE")
    if props and P.TRACEPARENT in props:
        return props[P.TRACEPARENT], props.get(P.TRACESTATE)
    return None


def parent_context(environ: Mapping[str, Any],
                   props: Mapping[str, str] | None = None) -> otel_context.Context | None:
    """The caller's trace context: the ``traceparent`` header, else a single message's
    ``traceparent`` property, else None (a new trace)."""
    found = _callers(environ, props)
    return None if found is None else telemetry.remote_context(*found)


def plain_parent(environ: Mapping[str, Any], props: Mapping[str, str] | None = None
                 ) -> otel_context.Context | str | None:
    """:func:`parent_context`, but a ``traceparent`` of the plain form with no ``tracestate``
    (``telemetry.plain_traceparent``, what the SDK sends) as its string: :meth:`ServerTracing.begin`
    with ``current=False`` makes a context-only child of it without parsing it
    (DEC-produce-span-handed)."""
    found = _callers(environ, props)
    if found is None:
        return None
    traceparent, tracestate = found
    if tracestate is None and telemetry.plain_traceparent(traceparent):
        return str(traceparent)
    return telemetry.remote_context(traceparent, tracestate)


def idle() -> None:
    """The current request carried no message (an empty pull): its span is not exported."""
    telemetry.mark_idle(trace.get_current_span())


class ServerTracing:
    """The request spans of one service (``service`` is the span name prefix: ``store``)."""

    def __init__(self, service: str, *, untraced: frozenset[str] = frozenset(),
                 in_trace_only: frozenset[str] = frozenset(),
                 self_traced: frozenset[str] = frozenset(),
                 operations: Mapping[str, str] | None = None) -> None:
        self.service = service
        self.tracer = trace.get_tracer(f"clepsydra_{service}")
        self.untraced = OPS_ENDPOINTS | untraced
        self.in_trace_only = in_trace_only
        self.self_traced = self_traced
        self.operations = dict(operations or {})
        """endpoint -> operation, where the view's name is not the operation's."""

    def begin(self, operation: str, environ: Mapping[str, Any],
              parent: otel_context.Context | str | None = None, *,
              traced: bool = True, current: bool = True) -> ServerScope:
        """Start the request's span and make it current (``traced`` False: no span).
        ``current`` False: a span that will not be recorded (context-only) is not made current
        (its scope's token is None): the caller hands it to what needs it
        (DEC-produce-span-handed); a recorded one is made current all the same. ``parent``: its
        context, or a plain ``traceparent`` (:func:`plain_parent`); None: the request's
        header's."""
        if not traced:
            return ServerScope(operation, trace.INVALID_SPAN, None, time.perf_counter())
        if parent is None:
            parent = parent_context(environ)
        if not current and (parent is None or isinstance(parent, str)):
            handed = telemetry.unrecorded_w3c(self.tracer, parent)
            if handed is not None:
                return ServerScope(operation, handed, None, time.perf_counter())
        context = telemetry.remote_context(parent) if isinstance(parent, str) else parent
        span = telemetry.unrecorded(self.tracer, context)
        if span is None:
            span = self.tracer.start_span(
                f"{self.service}.{operation}", context=context, kind=SpanKind.SERVER,
                attributes={"http.request.method": environ.get("REQUEST_METHOD", ""),
                            "url.path": environ.get("PATH_INFO", "")})
        elif not current:
            return ServerScope(operation, span, None, time.perf_counter())
        token = otel_context.attach(trace.set_span_in_context(span))
        return ServerScope(operation, span, token, time.perf_counter())

    def end(self, scope: ServerScope, status: int) -> None:
        """End the span (status 5xx: an error) and make the caller's context current again."""
        if scope.token is None:
            return
        span = scope.span
        if span.is_recording():
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.end()
        otel_context.detach(scope.token)  # type: ignore[arg-type]

    def operation(self, endpoint: str | None) -> str:
        if endpoint is None:
            return "unknown_route"
        return self.operations.get(endpoint) or endpoint.rpartition(".")[2]

    def traced(self, endpoint: str | None, environ: Mapping[str, Any]) -> bool:
        if endpoint in self.untraced:
            return False
        return endpoint not in self.in_trace_only or bool(environ.get("HTTP_TRACEPARENT"))

    def install(self, app: Flask,
                on_end: Callable[[ServerScope, int], None] | None = None) -> None:
        """A span for every request of ``app`` (but the untraced and self-traced ones);
        ``on_end(scope, status)`` runs after each (the service's request metrics)."""

        @app.before_request
        def _begin() -> None:
            endpoint = request.endpoint
            if endpoint in self.self_traced:
                return
            environ = request.environ
            setattr(g, _SCOPE, self.begin(self.operation(endpoint), environ,
                                          traced=self.traced(endpoint, environ)))

        @app.after_request
        def _status(response: Response) -> Response:
            setattr(g, _STATUS, response.status_code)
            return response

        @app.teardown_request
        def _end(exc: BaseException | None) -> None:
            scope: ServerScope | None = g.pop(_SCOPE, None)
            if scope is not None:
                status = g.pop(_STATUS, 500)
                self.end(scope, status)
                if on_end is not None:
                    on_end(scope, status)
