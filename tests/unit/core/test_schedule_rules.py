"""The delivery rules' formulas, once for the scheduler and the store (SPEC D3, D5, D8, D9)."""

from __future__ import annotations

from clepsydra_core.schedule_rules import (
    corrected_deliver_ts,
    due_count,
    first_pending,
    resume_offset,
)


def test_a_deliver_time_past_the_level_delay_is_corrected_to_now() -> None:
    # SPEC D3: the table was shortened since the message was stored
    assert corrected_deliver_ts(30_200, now_ms=200, delay_ms=1_000) == 200
    assert corrected_deliver_ts(1_200, now_ms=200, delay_ms=1_000) == 1_200
    assert corrected_deliver_ts(150, now_ms=200, delay_ms=1_000) == 150


def test_delivery_stops_at_the_first_entry_not_due() -> None:
    # SPEC D3, D5
    assert due_count([100, 200, 300, 150], now_ms=200, delay_ms=1_000, limit=10) == 2
    assert due_count([30_200, 300], now_ms=200, delay_ms=1_000, limit=10) == 1
    assert due_count([100, 100, 100], now_ms=200, delay_ms=1_000, limit=2) == 2


def test_delivery_resumes_after_the_mark_inside_the_queue() -> None:
    # SPEC D8, D9: after the handed-over mark, never below the minimum nor past the maximum
    assert first_pending(handed_over=3, min_offset=0) == 4
    assert first_pending(handed_over=-1, min_offset=7) == 7
    assert resume_offset(handed_over=3, min_offset=0, max_offset=10) == 4
    assert resume_offset(handed_over=12, min_offset=0, max_offset=10) == 10
    assert resume_offset(handed_over=-1, min_offset=7, max_offset=10) == 7
