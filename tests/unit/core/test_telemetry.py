"""Tracing set-up and W3C trace context carried in message properties (SPEC O1), and the JSON
log formatter that prints the trace id."""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clepsydra_core import properties as P
from clepsydra_core.errors import ConfigError
from clepsydra_core.runtime import logging as clogging
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.logging import (
    CELERY_SERIALIZERS,
    JsonFormatter,
    configure,
    quiet_celery_root_warning,
)


def test_traceparent_round_trips_through_properties(spans: InMemorySpanExporter) -> None:  # O1
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("store.put") as producer:
        props = telemetry.inject({"app": "kept"})
    producer_ctx = producer.get_span_context()
    version, trace_id, span_id, flags = props[P.TRACEPARENT].split("-")
    assert version == "00"
    assert trace_id == f"{producer_ctx.trace_id:032x}"
    assert span_id == f"{producer_ctx.span_id:016x}"
    assert int(flags, 16) & 0x01  # sampled; the SDK writes 03, never compare to "01"
    assert props["app"] == "kept"

    with tracer.start_as_current_span("scheduler.deliver", context=telemetry.extract(props)):
        pass
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["store.put", "scheduler.deliver"]
    child = finished[1]
    assert child.context is not None and child.context.trace_id == producer_ctx.trace_id
    assert child.parent is not None and child.parent.span_id == producer_ctx.span_id


def test_link_from_and_trace_id_of(spans: InMemorySpanExporter) -> None:  # SPEC O1
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("store.put"):
        props = telemetry.inject({})
    with tracer.start_as_current_span("retry.send_back", links=telemetry.link_from(props)):
        pass
    producer, linked = spans.get_finished_spans()
    producer_trace = f"{producer.context.trace_id:032x}"
    assert [f"{link.context.trace_id:032x}" for link in linked.links] == [producer_trace]
    assert P.trace_id_of(props) == producer_trace


def test_no_context_means_no_link_and_no_trace_id(spans: InMemorySpanExporter) -> None:
    assert telemetry.inject({}) == {}  # no active span: nothing written
    assert telemetry.link_from({}) == []
    assert telemetry.link_from({P.TRACEPARENT: "garbage"}) == []
    assert P.trace_id_of({}) is None
    assert P.trace_id_of({P.TRACEPARENT: "garbage"}) is None
    assert not trace.get_current_span(telemetry.extract({"other": "x"})).get_span_context(
    ).is_valid


def test_init_tracing_is_once_per_process(spans: InMemorySpanExporter) -> None:
    first = trace.get_tracer_provider()
    assert telemetry.init_tracing("someone-else", "console") is first


def test_unknown_exporter_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_provider", None)
    monkeypatch.setattr(telemetry, "_exporting", False)
    with pytest.raises(ConfigError, match="CLEPSYDRA_OTEL_EXPORTER"):
        telemetry.init_tracing("x", "zipkin")
    assert telemetry.exporting() is False


def test_exporting_is_false_only_for_the_none_exporter(spans: InMemorySpanExporter) -> None:
    assert telemetry.exporting() is True  # memory
    telemetry.reset_after_fork()
    assert telemetry.exporting() is False
    provider = telemetry.init_tracing("x", "none")
    assert telemetry.exporting() is False
    provider.shutdown()


def test_resource_names_the_service_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    attrs = telemetry.service_resource(telemetry.STORE_SERVICE).attributes
    assert attrs["service.name"] == "clepsydra-store"
    assert attrs["service.version"] == metadata.version("clepsydra-store")


def test_resource_honours_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # OTEL_RESOURCE_ATTRIBUTES over ours; OTEL_SERVICE_NAME over a service.name in them
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                       "service.name=from-attrs,deployment.environment.name=prod,"
                       "service.version=9")
    attrs = telemetry.service_resource(telemetry.RETRY_SERVICE).attributes
    assert (attrs["service.name"], attrs["service.version"]) == ("from-attrs", "9")
    assert attrs["deployment.environment.name"] == "prod"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "retry-eu")
    assert telemetry.service_resource(telemetry.RETRY_SERVICE).attributes[
        "service.name"] == "retry-eu"


def test_idle_spans_are_not_exported(spans: InMemorySpanExporter) -> None:
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("store.pull") as empty:
        telemetry.mark_idle(empty)
    with tracer.start_as_current_span("store.pull"):
        pass
    exported = spans.get_finished_spans()
    assert [s.name for s in exported] == ["store.pull"]
    assert telemetry.IDLE not in (exported[0].attributes or {})


@pytest.mark.parametrize(("traceparent", "sampled"), [
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", True),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03", True),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", False),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz", False),
    ("", False), (None, False), ("1", False),
])
def test_parent_sampled_reads_the_flag(traceparent: str | None, sampled: bool) -> None:  # O1
    assert telemetry.parent_sampled(traceparent) is sampled


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("clepsydra.test", logging.INFO, __file__, 1, msg, args, exc_info)


def test_json_log_line_carries_the_trace_id_inside_a_span(spans: InMemorySpanExporter) -> None:
    # time, level, service, logger, message; trace_id and span_id inside a span
    formatter = JsonFormatter("clepsydra-test")
    outside = json.loads(formatter.format(_record("idle")))
    assert list(outside) == ["time", "level", "service", "logger", "message"]
    with telemetry.tracer("test").start_as_current_span("store.put") as span:
        line = formatter.format(_record("dispatched topic=%s queue_id=%d", "延迟", 3))
    out = json.loads(line)
    assert out["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert out["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert out["message"] == "dispatched topic=延迟 queue_id=3"
    assert "延迟" in line  # not \u-escaped
    assert out["level"] == "INFO" and out["logger"] == "clepsydra.test"
    assert out["service"] == "clepsydra-test" and out["time"].endswith("Z")


def test_json_log_line_includes_the_exception() -> None:
    out = json.loads(JsonFormatter().format(_record("failed", exc=True)))
    assert "RuntimeError: boom" in out["exc"]


@pytest.fixture
def own_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """configure() freely: the root logger, the chosen format and captured warnings are put
    back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(clogging, "_current", dict(clogging._current))
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)


def _configured(capsys: pytest.CaptureFixture[str], fmt: str, emit: Callable[[], None]) -> str:
    configure("DEBUG", service="clepsydra-test", fmt=fmt)
    emit()
    return capsys.readouterr().out


@pytest.mark.usefixtures("own_logging")
def test_configure_sends_json_lines_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    out = _configured(capsys, "json",
                      lambda: logging.getLogger("clepsydra.test").debug("hello %s", "world"))
    [line] = out.splitlines()
    assert json.loads(line)["message"] == "hello world"
    assert json.loads(line)["service"] == "clepsydra-test"


@pytest.mark.usefixtures("own_logging")
def test_text_format_is_one_readable_line(capsys: pytest.CaptureFixture[str],
                                          spans: InMemorySpanExporter) -> None:
    # CLEPSYDRA_LOG_FORMAT=text, the same fields for people
    def emit() -> None:
        log = logging.getLogger("clepsydra.test")
        log.info("plain %d", 1)
        with telemetry.tracer("test").start_as_current_span("x") as span:
            log.warning("in a span")
        ids.append(span.get_span_context())

    ids: list[Any] = []
    first, second = _configured(capsys, "text", emit).splitlines()
    assert first.endswith(" INFO    clepsydra-test clepsydra.test: plain 1")
    assert first[:24].endswith("Z") and not first.startswith("{")
    assert second.endswith(f"WARNING clepsydra-test clepsydra.test: in a span "
                           f"trace_id={ids[0].trace_id:032x} span_id={ids[0].span_id:016x}")
    with pytest.raises(ValueError):
        configure("INFO", fmt="xml")


@pytest.mark.usefixtures("own_logging")
def test_python_warnings_become_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    # a warning is a log line like any other, not plain text on stderr
    def emit() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("careful", UserWarning, stacklevel=1)

    [line] = _configured(capsys, "json", emit).splitlines()
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "py.warnings"
    assert "UserWarning: careful" in out["message"]


@pytest.mark.usefixtures("own_logging")
def test_celery_root_warning_is_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    # the workers accept JSON only and run as the stack's user, as intended (see
    # quiet_celery_root_warning); other warnings still show
    from celery.exceptions import SecurityWarning
    from celery.platforms import ROOT_DISCOURAGED

    def emit() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            quiet_celery_root_warning()
            warnings.warn(SecurityWarning(ROOT_DISCOURAGED.format(uid=0, euid=0, gid=0,
                                                                  egid=0)), stacklevel=1)
            warnings.warn(SecurityWarning("another"), stacklevel=1)

    [line] = _configured(capsys, "json", emit).splitlines()
    assert "another" in json.loads(line)["message"]
    assert CELERY_SERIALIZERS["accept_content"] == ["json"]


def test_without_an_exporter_spans_carry_context_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC O1: exporter none costs (almost) nothing, yet traceparent still flows
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    telemetry.reset_after_fork()
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_always_on")
    provider = telemetry.init_tracing(telemetry.CLIENT_SERVICE, "none")
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("client.produce") as root:
        assert not root.is_recording()
        props = telemetry.inject({})
        child = tracer.start_span("client.consume", context=telemetry.extract(props))
    root_ctx, child_ctx = root.get_span_context(), child.get_span_context()
    assert root_ctx.is_valid and root_ctx.trace_flags.sampled
    assert props[P.TRACEPARENT] == f"00-{root_ctx.trace_id:032x}-{root_ctx.span_id:016x}-01"
    assert child_ctx.trace_id == root_ctx.trace_id and child_ctx.span_id != root_ctx.span_id
    exporter = InMemorySpanExporter()  # a processor added later (a test's): real spans
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tracer.start_as_current_span("client.produce") as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["client.produce"]
    provider.shutdown()
