"""Fixtures shared by the unit suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clepsydra_core.runtime import telemetry


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A fresh process-wide tracer provider with the memory exporter; the previous one is
    put back afterwards, so test order does not matter."""
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    telemetry.reset_after_fork()
    provider = telemetry.init_tracing("clepsydra-test", "memory")
    assert trace.get_tracer_provider() is provider
    yield telemetry.memory_exporter()
    provider.shutdown()
