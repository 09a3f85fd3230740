"""The README's trace picture (SPEC O1): tools/trace_picture.py
draws a trace captured by the file exporter as a tree of bars, one row per span."""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from clepsydra_core.runtime import telemetry
from tools import trace_picture

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def capture(path: Path) -> None:
    """A small trace as CLEPSYDRA_OTEL_EXPORTER=file:<path> writes it: produce, park,
    a failed attempt sent back, a retried one that succeeds; and a root of another kind."""
    client = TracerProvider(resource=Resource.create({"service.name": telemetry.CLIENT_SERVICE}))
    store = TracerProvider(resource=Resource.create({"service.name": telemetry.STORE_SERVICE}))
    for provider in (client, store):
        provider.add_span_processor(SimpleSpanProcessor(telemetry.JsonLinesSpanExporter(
            str(path))))
    c, s = client.get_tracer("t"), store.get_tracer("t")
    with c.start_as_current_span("client.produce", attributes={telemetry.DELAY_LEVEL: 1}):
        with s.start_as_current_span("store.produce"):
            pass
        failed = {telemetry.RECONSUME_TIMES: 0, telemetry.RESULT: "RECONSUME_LATER"}
        with c.start_as_current_span("client.consume", attributes=failed), \
                c.start_as_current_span("client.send_back"), \
                s.start_as_current_span("store.copy"):
            pass
        with c.start_as_current_span("client.consume", attributes={
                telemetry.RECONSUME_TIMES: 1, telemetry.RESULT: "SUCCESS"}):
            pass
    with s.start_as_current_span("store.handover"):  # not a message's trace: not drawn
        pass
    client.shutdown()
    store.shutdown()
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_captured_trace_is_drawn_as_a_tree_of_bars(tmp_path: Path) -> None:
    spans_file, out = tmp_path / "spans.jsonl", tmp_path / "pictures" / "trace.png"
    capture(spans_file)
    spans = trace_picture.load(spans_file)
    rows = trace_picture.render(spans, out)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    assert [("  " * r.depth + r.name, r.service) for r in rows] == [
        ("client.produce", telemetry.CLIENT_SERVICE),
        ("  store.produce", telemetry.STORE_SERVICE),
        ("  client.consume", telemetry.CLIENT_SERVICE),
        ("    client.send_back", telemetry.CLIENT_SERVICE),
        ("      store.copy", telemetry.STORE_SERVICE),
        ("  client.consume", telemetry.CLIENT_SERVICE)]
    assert rows[0].start_ms == 0 and all(r.end_ms >= r.start_ms >= 0 for r in rows)
    assert rows[2].note == "reconsume=0 RECONSUME_LATER"
    trace_id = rows[0].trace_id
    assert trace_picture.story(spans, trace_id) == \
        "sent with delay level 1, failed 1 time, consumed"


def test_the_script_draws_the_traces_asked_for(tmp_path: Path) -> None:
    spans_file, out = tmp_path / "spans.jsonl", tmp_path / "trace.png"
    capture(spans_file)
    handover = next(s["traceId"] for s in trace_picture.load(spans_file)
                    if s["name"] == "store.handover")
    assert trace_picture.main([str(spans_file), str(out), "--trace", handover]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE
