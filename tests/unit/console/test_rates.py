"""Rates between page views (clepsydra_console.rates, DEC-console-rates-on-demand): counters
read from Prometheus text, summed by labels, no reading closer than min_gap_s, a rate only
once two readings lie apart, none across a counter reset."""

from __future__ import annotations

from clepsydra_console import rates

TEXT = """# HELP clepsydra_retry_send_backs_total Send-backs
# TYPE clepsydra_retry_send_backs_total counter
clepsydra_retry_send_backs_total{group="g",outcome="DLQ"} 3.0
clepsydra_retry_send_backs_total{group="g",outcome="RETRY"} 7.0
clepsydra_retry_send_backs_total{group="h",outcome="DLQ"} 1.0
clepsydra_retry_dlq_depth{group="g"} 4.0
other_metric 9
"""


def test_counters_are_read_and_summed_by_label() -> None:
    counters = rates.parse_metrics(TEXT, (rates.SEND_BACKS, rates.DLQ_DEPTH))
    assert "other_metric" not in counters
    assert rates.total(counters, rates.SEND_BACKS) == 11
    assert rates.total(counters, rates.SEND_BACKS, outcome="DLQ") == 4
    assert rates.total(counters, rates.SEND_BACKS, group="g", outcome="DLQ") == 3
    assert rates.total(counters, rates.DLQ_DEPTH, group="g") == 4


def test_rates_between_readings() -> None:
    now = [0.0]
    values = iter([10.0, 10.0, 30.0, 5.0])
    reads: list[float] = []

    def read() -> rates.Counters:
        reads.append(now[0])
        return {"c_total": next(values)}

    s = rates.Sampler(read, min_gap_s=2.0, clock=lambda: now[0])
    assert s.rate("c_total") is None  # one reading
    now[0] = 1.0
    assert s.rate("c_total") is None and reads == [0.0]  # too soon: no second read
    now[0] = 2.5
    assert s.rate("c_total") == 0.0
    now[0] = 12.5
    assert s.rate("c_total") == 20.0 / 12.5
    now[0] = 20.0
    assert s.rate("c_total") is None  # went back: a restart


def test_a_reading_that_fails_is_said() -> None:
    def read() -> rates.Counters:
        raise OSError("connection refused")

    s = rates.Sampler(read)
    assert s.value("x") is None and s.error == "connection refused"
