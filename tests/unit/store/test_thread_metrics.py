"""The per-thread request metrics (DEC-thread-metrics) expose what prometheus_client's own
Counter and Histogram would for the same values, observed from several threads at once (SPEC
O2: request counts and latency by operation)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from clepsydra_store.api.thread_metrics import RequestMetrics, ThreadCounter

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 1.0)
THREADS, EACH = 4, 2_000
OBSERVED = [("produce", 201, 0.0004), ("produce", 201, 0.0005), ("produce", 400, 0.003),
            ("pull", 200, 0.02), ("pull", 200, 7.5), ("produce", 201, 0.0011)]


def exposition(registry: CollectorRegistry) -> list[str]:
    """The sample lines; a sum's value rounded (floats added in another order differ in
    their last digits)."""
    lines = [line for line in generate_latest(registry).decode().splitlines()
             if not line.startswith("#") and "_created" not in line]
    return [f"{line.rsplit(' ', 1)[0]} {float(line.rsplit(' ', 1)[1]):.9f}"
            if "_sum{" in line else line for line in lines]


def _in_threads(work: list[threading.Thread]) -> None:
    for t in work:
        t.start()
    for t in work:
        t.join()


def test_request_metrics_match_prometheus_counter_and_histogram() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    metrics = RequestMetrics(("reqs", "doc"), ("req_seconds", "doc"), BUCKETS)
    ours.register(metrics)
    counter = Counter("reqs", "doc", ["operation", "status"], registry=theirs)
    histogram = Histogram("req_seconds", "doc", ["operation"], buckets=BUCKETS, registry=theirs)

    def observe() -> None:
        for i in range(EACH):
            operation, status, seconds = OBSERVED[i % len(OBSERVED)]
            metrics.observe(operation, status, seconds)
            counter.labels(operation, str(status)).inc()
            histogram.labels(operation).observe(seconds)
    _in_threads([threading.Thread(target=observe) for _ in range(THREADS)])
    assert exposition(ours) == exposition(theirs)
    produce_201 = THREADS * sum(OBSERVED[i % len(OBSERVED)][:2] == ("produce", 201)
                                for i in range(EACH))
    assert f'reqs_total{{operation="produce",status="201"}} {float(produce_201)}' in \
        exposition(ours)
    assert 'req_seconds_bucket{le="+Inf",operation="pull"}' in "\n".join(exposition(ours))


def test_a_thread_counter_loses_no_increment_across_threads() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = ThreadCounter("answered", "doc")
    ours.register(counter)
    reference = Counter("answered", "doc", registry=theirs)

    def add() -> None:
        for i in range(EACH):
            counter.inc(i % 3)
            reference.inc(i % 3)
    _in_threads([threading.Thread(target=add) for _ in range(THREADS)])
    assert counter.value() == THREADS * sum(i % 3 for i in range(EACH))
    assert exposition(ours) == exposition(theirs)
