"""The store's batch-fed lateness histogram exposes what prometheus_client's own Histogram
would for the same values (SPEC D10)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from clepsydra_store.api.observability import BatchHistogram

BUCKETS = (5, 10, 25, 50, 100)


def exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines()
            if not line.startswith("#") and "_created" not in line]


def test_batch_histogram_matches_prometheus_histogram() -> None:  # SPEC D10
    values = {"1": [0, 5, 6, 10, 11, 99, 100, 101, 5000], "3": [7, 7, 7]}
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("lateness_ms", "doc", "level", BUCKETS)
    ours.register(batch)
    reference = Histogram("lateness_ms", "doc", ["level"], buckets=BUCKETS, registry=theirs)
    for level, vs in values.items():
        batch.observe_many(level, vs[:4])
        batch.observe_many(level, vs[4:])
        batch.observe_many(level, [])
        for v in vs:
            reference.labels(level).observe(v)
    assert exposition(ours) == exposition(theirs)
    assert 'lateness_ms_bucket{le="5.0",level="1"} 2.0' in exposition(ours)
    assert 'lateness_ms_count{level="3"} 3.0' in exposition(ours)
