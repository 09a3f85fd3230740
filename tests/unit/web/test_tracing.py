"""Request spans the same way in every HTTP service (clepsydra_web.tracing, SPEC O1): the
caller's traceparent continued, ops routes and idle requests not exported, polls traced only
inside a caller's trace."""

from __future__ import annotations

from flask import Flask, jsonify
from flask.testing import FlaskClient
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from clepsydra_web.ops import ops_blueprint
from clepsydra_web.tracing import ServerTracing, idle

CALLER = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def client() -> FlaskClient:
    app = Flask("clepsydra_web")
    registry = CollectorRegistry()

    @app.get("/v1/work")
    def work() -> object:
        ctx = trace.get_current_span().get_span_context()
        return jsonify({"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}"})

    @app.get("/v1/poll")
    def poll() -> object:
        return jsonify({})

    @app.get("/v1/empty")
    def empty() -> object:
        idle()
        return jsonify({})

    app.register_blueprint(ops_blueprint("clepsydra_web", health=lambda: ({}, 200),
                                         registry=lambda: registry))
    ServerTracing("svc", in_trace_only=frozenset({"poll"}),
                  operations={"work": "do_work"}).install(app)
    return app.test_client()


def test_a_request_continues_the_callers_trace(spans: InMemorySpanExporter) -> None:
    answer = client().get("/v1/work", headers={"traceparent": CALLER}).get_json()
    (span,) = spans.get_finished_spans()
    assert span.name == "svc.do_work" and span.kind == trace.SpanKind.SERVER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "b" * 16
    assert answer == {"traceId": "a" * 32, "spanId": f"{span.context.span_id:016x}"}
    assert (span.attributes or {})["http.response.status_code"] == 200


def test_without_a_caller_a_request_starts_a_trace(spans: InMemorySpanExporter) -> None:
    client().get("/v1/work")
    (span,) = spans.get_finished_spans()
    assert span.parent is None


def test_ops_routes_idle_requests_and_lone_polls_make_no_span(
        spans: InMemorySpanExporter) -> None:
    http = client()
    for path in ("/healthz", "/metrics", "/v1/poll", "/v1/empty"):
        assert http.get(path).status_code == 200, path
    assert http.get("/v1/empty", headers={"traceparent": CALLER}).status_code == 200
    assert spans.get_finished_spans() == ()
    http.get("/v1/poll", headers={"traceparent": CALLER})  # inside a caller's trace: traced
    assert [s.name for s in spans.get_finished_spans()] == ["svc.poll"]
