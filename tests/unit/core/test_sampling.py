"""The sampler and what a span that will not be recorded costs (SPEC O1): the
default sampler per exporter, ``OTEL_TRACES_SAMPLER`` honoured, the decision taken where a
trace starts and carried in ``traceparent``'s flags to every later hop, and no SDK span (nor
its attributes) for a span nobody will see."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from clepsydra_web.tracing import ServerTracing

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-33333333333333333333333333333333-4444444444444444-00"

Install = Callable[..., tuple[TracerProvider, InMemorySpanExporter]]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """install(exporter, sampler=None, ratio=None): this process's provider as init_tracing
    makes it for ``exporter`` under the given OTEL_TRACES_SAMPLER(_ARG), with an in-memory
    exporter added (put back afterwards)."""
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    providers: list[TracerProvider] = []

    def install(exporter: str, sampler: str | None = None,
                ratio: str | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
        for var, value in ((telemetry.SAMPLER_VAR, sampler), (telemetry.SAMPLER_ARG_VAR, ratio)):
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
        telemetry.reset_after_fork()
        provider = telemetry.init_tracing(telemetry.CLIENT_SERVICE, exporter)
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        providers.append(provider)
        return provider, memory

    yield install
    for provider in providers:
        provider.shutdown()


@pytest.mark.parametrize(("exporter", "description"), [
    ("otlp", sampling.ParentBasedTraceIdRatio(telemetry.DEFAULT_RATIO).get_description()),
    ("none", sampling.ParentBasedTraceIdRatio(telemetry.DEFAULT_RATIO).get_description()),
    ("console", sampling.ParentBased(sampling.ALWAYS_ON).get_description()),
    ("memory", sampling.ParentBased(sampling.ALWAYS_ON).get_description()),
    ("file:/tmp/x", sampling.ParentBased(sampling.ALWAYS_ON).get_description()),
])
def test_default_sampler_per_exporter(monkeypatch: pytest.MonkeyPatch, exporter: str,
                                      description: str) -> None:  # SPEC O1: default sampler
    monkeypatch.delenv(telemetry.SAMPLER_VAR, raising=False)
    assert telemetry.default_sampler(exporter).get_description() == description


def test_the_sampler_variables_win_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_always_on")
    assert telemetry.default_sampler("otlp").get_description() == \
        sampling.ParentBased(sampling.ALWAYS_ON).get_description()
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "traceidratio")
    monkeypatch.setenv(telemetry.SAMPLER_ARG_VAR, "0.25")
    assert telemetry.default_sampler("memory").get_description() == \
        sampling.TraceIdRatioBased(0.25).get_description()


def test_a_trace_sampled_away_makes_no_span_yet_carries_its_context(install: Install) -> None:
    _, memory = install("none", "parentbased_traceidratio", "0")
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("client.produce") as root:
        props = telemetry.inject({})
        child = tracer.start_span("store.produce", context=telemetry.extract(props))
        child.end()
    assert not isinstance(root, SdkSpan) and not root.is_recording()
    assert not isinstance(child, SdkSpan)
    _, trace_id, span_id, flags = props[P.TRACEPARENT].split("-")
    ctx = root.get_span_context()
    assert (trace_id, span_id) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert flags == "00"  # the decision travels: not sampled
    assert child.get_span_context().trace_id == ctx.trace_id
    assert memory.get_finished_spans() == ()


def test_a_sampled_parent_is_traced_whatever_this_process_samples(install: Install) -> None:
    # the producer decided (sampled); a process whose own ratio is 0 records its hop
    _, memory = install("none", "parentbased_traceidratio", "0")
    tracer = telemetry.tracer("test")
    span = tracer.start_span("store.produce", context=telemetry.extract(
        {P.TRACEPARENT: SAMPLED}), attributes={telemetry.DESTINATION: "T"})
    with trace.use_span(span, end_on_exit=True):
        props = telemetry.inject({})
    [finished] = memory.get_finished_spans()
    assert finished.context is not None and finished.parent is not None
    assert f"{finished.context.trace_id:032x}" == SAMPLED.split("-")[1]
    assert f"{finished.parent.span_id:016x}" == SAMPLED.split("-")[2]
    assert finished.attributes == {telemetry.DESTINATION: "T"}
    assert int(props[P.TRACEPARENT][-2:], 16) & 1  # passed on sampled


def test_an_unsampled_parent_makes_no_span_even_where_everything_is_sampled(
        install: Install) -> None:
    _, memory = install("memory")  # parent-based, always on
    tracer = telemetry.tracer("test")
    parent = telemetry.extract({P.TRACEPARENT: UNSAMPLED})
    assert telemetry.unrecorded(tracer, parent) is not None  # hot paths skip their attributes
    assert telemetry.unrecorded(tracer, telemetry.extract({P.TRACEPARENT: SAMPLED})) is None
    span = tracer.start_span("client.consume", context=parent)
    assert not isinstance(span, SdkSpan)
    with trace.use_span(span, end_on_exit=True):
        props = telemetry.inject({})
    assert props[P.TRACEPARENT].split("-")[1] == UNSAMPLED.split("-")[1]
    assert props[P.TRACEPARENT].endswith("-00")
    assert memory.get_finished_spans() == ()


def test_unsampled_requests_make_no_recording_server_span(install: Install) -> None:
    _, memory = install("memory")
    server = ServerTracing("store")
    scope = server.begin("produce", {"HTTP_TRACEPARENT": UNSAMPLED, "REQUEST_METHOD": "POST"})
    assert not isinstance(scope.span, SdkSpan) and not scope.span.is_recording()
    assert trace.get_current_span() is scope.span  # current, so its context is passed on
    server.end(scope, 201)
    scope = server.begin("produce", {"HTTP_TRACEPARENT": SAMPLED, "REQUEST_METHOD": "POST"})
    assert scope.span.is_recording()
    server.end(scope, 201)
    assert [s.name for s in memory.get_finished_spans()] == ["store.produce"]


@pytest.mark.parametrize("asked_first", [False, True])
def test_new_traces_are_sampled_at_the_ratio_decided_once(install: Install,
                                                          asked_first: bool) -> None:
    # the ratio applies once per new trace (decided on its trace id, which the recorded span
    # keeps), not once more when the span is made - also when a hot path asks first
    provider, memory = install("none", "parentbased_traceidratio", "0.5")
    tracer = telemetry.tracer("test")
    root = sampling.TraceIdRatioBased(0.5)
    recorded = 0
    for _ in range(400):
        span = (asked_first and telemetry.unrecorded(tracer)) \
            or tracer.start_span("client.produce")
        span.end()
        ctx = span.get_span_context()
        sampled = bool(ctx.trace_flags.sampled)
        assert sampled == (ctx.trace_id & root.TRACE_ID_LIMIT < root.bound)
        recorded += sampled
    assert len(memory.get_finished_spans()) == recorded
    assert 140 < recorded < 260  # ~200 of 400 (sd 10); deciding twice would give ~100
    assert provider is trace.get_tracer_provider()


def test_without_an_exporter_new_traces_carry_the_default_decision(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # exporter none: nothing recorded here, but the flags a new trace sends on are the
    # sampler's, so that the processes that do export sample the same share
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_traceidratio")
    monkeypatch.setenv(telemetry.SAMPLER_ARG_VAR, "0")
    telemetry.reset_after_fork()
    telemetry.init_tracing(telemetry.CLIENT_SERVICE, "none")
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("client.produce"):
        assert telemetry.inject({})[P.TRACEPARENT].endswith("-00")
    monkeypatch.setenv(telemetry.SAMPLER_ARG_VAR, "1")
    telemetry.reset_after_fork()
    telemetry.init_tracing(telemetry.CLIENT_SERVICE, "none")
    with telemetry.tracer("test").start_as_current_span("client.produce") as span:
        assert not span.is_recording()
        assert telemetry.inject({})[P.TRACEPARENT].endswith("-01")


@pytest.mark.parametrize("header", [
    SAMPLED, UNSAMPLED, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\t",
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # 00 has 4 fields
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", "garbage", "",
])
@pytest.mark.parametrize("state", [None, "vendor=abc,other=1"])
def test_trace_context_is_read_as_the_w3c_propagator_reads_it(header: str,
                                                              state: str | None) -> None:
    # O1: telemetry.remote_context is the propagator's extract, made cheaper
    carrier = {P.TRACEPARENT: header, **({P.TRACESTATE: state} if state else {})}
    expected = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier))
    got = trace.get_current_span(telemetry.remote_context(header, state))
    assert got.get_span_context() == expected.get_span_context()
    assert got.get_span_context().trace_state == expected.get_span_context().trace_state
    assert trace.get_current_span(telemetry.extract(carrier)).get_span_context() == \
        expected.get_span_context()


@pytest.mark.parametrize(("sampler", "root", "under_sampled", "under_unsampled"), [
    ("parentbased_always_on", True, True, False),
    ("parentbased_always_off", False, True, False),
    ("always_on", True, True, True),  # not parent-based: a child is sampled on its own
    ("always_off", False, False, False),
    ("traceidratio", True, True, True),  # ratio 1 (no OTEL_TRACES_SAMPLER_ARG)
])
def test_every_standard_sampler_decides_as_the_sdk_documents(
        install: Install, sampler: str, root: bool, under_sampled: bool,
        under_unsampled: bool) -> None:
    _, memory = install("none", sampler)
    tracer = telemetry.tracer("test")
    made = [tracer.start_span("new"),
            tracer.start_span("child", context=telemetry.extract({P.TRACEPARENT: SAMPLED})),
            tracer.start_span("other", context=telemetry.extract({P.TRACEPARENT: UNSAMPLED}))]
    for span in made:
        span.end()
    exported = {s.name for s in memory.get_finished_spans()}
    assert exported == {name for name, kept in zip(
        ("new", "child", "other"), (root, under_sampled, under_unsampled), strict=True) if kept}
    # what is not recorded is no SDK span at all
    assert {s.name for s in made if isinstance(s, SdkSpan)} == exported


def test_a_batch_gets_one_context_per_message_decided_once_each(install: Install) -> None:
    # SPEC O1: a batch's contexts drawn at once - context-only ones as traceparents, the
    # sampled new traces as trace ids whose spans are then started with them
    _, memory = install("none", "parentbased_traceidratio", "0.5")
    tracer = telemetry.tracer("test")
    root = sampling.TraceIdRatioBased(0.5)
    contexts = telemetry.batch_contexts(tracer, 400)
    lean = [c for c in contexts if isinstance(c, str)]
    decided = [c for c in contexts if isinstance(c, int)]
    assert len(lean) + len(decided) == 400
    assert 140 < len(decided) < 260  # ~200: the ratio, once
    for value in lean:
        _, trace_hex, span_hex, flags = value.split("-")
        assert flags == "00" and not (int(trace_hex, 16) & root.TRACE_ID_LIMIT < root.bound)
        assert int(span_hex, 16) and len(trace_hex) == 32 and len(span_hex) == 16
    for trace_id in decided:
        assert trace_id & root.TRACE_ID_LIMIT < root.bound
        telemetry.start_decided(tracer, trace_id, "client.produce").end()
    finished = memory.get_finished_spans()
    assert sorted(s.context.trace_id for s in finished if s.context) == sorted(decided)
    assert len({c.split("-")[1] for c in lean} | {f"{t:032x}" for t in decided}) == 400


def test_a_batch_under_a_parent_follows_its_decision(install: Install) -> None:
    install("memory")
    tracer = telemetry.tracer("test")
    with trace.use_span(trace.get_current_span(telemetry.extract({P.TRACEPARENT: UNSAMPLED}))):
        children = telemetry.batch_contexts(tracer, 3)
    assert all(isinstance(c, str) and c.startswith(f"00-{UNSAMPLED.split('-')[1]}-")
               and c.endswith("-00") for c in children)
    assert len(set(children)) == 3
    with trace.use_span(trace.get_current_span(telemetry.extract({P.TRACEPARENT: SAMPLED}))):
        assert telemetry.batch_contexts(tracer, 3) == [None] * 3  # recorded: real spans
    assert telemetry.batch_contexts(trace.NoOpTracer(), 2) == [None] * 2


def test_without_an_exporter_a_batch_carries_the_samplers_flags(install: Install,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    install("none", "parentbased_always_on")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, telemetry.LeanTracerProvider)
    monkeypatch.setattr(provider, "records", False)  # as with exporter none
    contexts = telemetry.batch_contexts(telemetry.tracer("test"), 5)
    assert all(isinstance(c, str) and c.endswith("-01") for c in contexts)


@pytest.mark.parametrize("header", [
    SAMPLED, UNSAMPLED, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", "garbage", "", 7,
])
def test_only_a_plain_traceparent_is_taken_as_it_is(header: object) -> None:
    # DEC-produce-span-handed: any other form is read by remote_context, as the propagator
    plain = telemetry.plain_traceparent(header)
    assert plain == (header in (SAMPLED, UNSAMPLED) or header == (
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"))
    if plain:  # what is taken as it is reads as the propagator reads it
        assert trace.get_current_span(telemetry.remote_context(str(header))) \
            .get_span_context().is_valid


@pytest.mark.parametrize("sampler", ["parentbased_traceidratio", "parentbased_always_on",
                                     "parentbased_always_off", "always_on", "always_off"])
@pytest.mark.parametrize("parent", [SAMPLED, UNSAMPLED,
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"])
@pytest.mark.parametrize("records", [True, False])
def test_a_handed_span_is_decided_as_a_context_only_one(
        install: Install, monkeypatch: pytest.MonkeyPatch, sampler: str, parent: str,
        records: bool) -> None:
    # DEC-produce-span-handed: the string-made child of a plain traceparent is made exactly
    # where unrecorded() makes a context-only span, with its trace id and flags
    install("none", sampler)
    monkeypatch.setattr(trace.get_tracer_provider(), "records", records)
    tracer = telemetry.tracer("test")
    handed = telemetry.unrecorded_w3c(tracer, parent)
    usual = telemetry.unrecorded(tracer, telemetry.remote_context(parent))
    assert (handed is None) == (usual is None)
    if handed is None or usual is None:
        return
    assert isinstance(handed, telemetry.HandedSpan) and not handed.is_recording()
    got, want = handed.get_span_context(), usual.get_span_context()
    assert (got.trace_id, got.trace_flags) == (want.trace_id, want.trace_flags)
    assert got.span_id not in (0, int(parent.split("-")[2], 16))
    assert telemetry.inject({}, handed) == telemetry.inject({}, trace.NonRecordingSpan(got)) \
        == {P.TRACEPARENT: handed.traceparent}


@pytest.mark.parametrize("records", [True, False])
def test_a_handed_new_trace_is_sampled_at_the_ratio_decided_once(
        install: Install, monkeypatch: pytest.MonkeyPatch, records: bool) -> None:
    # a new trace's handed span: the sampler's flags when nothing records here; where spans
    # are recorded a sampled one is the SDK's, with the trace id decided (not decided again)
    _, memory = install("none", "parentbased_traceidratio", "0.5")
    monkeypatch.setattr(trace.get_tracer_provider(), "records", records)
    tracer = telemetry.tracer("test")
    root = sampling.TraceIdRatioBased(0.5)
    sampled_count = 0
    for _ in range(400):
        handed = telemetry.unrecorded_w3c(tracer, None)
        if handed is None:  # recorded: the SDK span takes the decided trace id
            assert records
            span = tracer.start_span("store.produce")
            span.end()
            ctx = span.get_span_context()
        else:
            ctx = handed.get_span_context()
            assert ctx.is_valid and not handed.is_recording()
        sampled = ctx.trace_id & root.TRACE_ID_LIMIT < root.bound
        assert bool(ctx.trace_flags.sampled) == sampled
        assert (handed is None) == (sampled and records)
        sampled_count += sampled
    assert 140 < sampled_count < 260  # ~200 of 400 (sd 10)
    assert len(memory.get_finished_spans()) == (sampled_count if records else 0)
