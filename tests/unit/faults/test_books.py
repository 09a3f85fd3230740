"""The fault matrix's books (tests/faults/load.py): which fault explains a consumer duplicate.
A wrong charge either hides a duplicate nothing explains or fails the matrix on a duplicate a
fault did cause (SPEC R9: a send-back refused while the disk is full is consumed again)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.faults.load import CONSUMER_FAULT, LATENESS_LEAD_MS, Books, Disruption, max_lateness


def _line(group: str, seq: int, reconsume: int, t: int, ok: bool = False) -> dict[str, Any]:
    return {"t": t, "group": group, "seq": seq, "phase": "p", "reconsume": reconsume, "ok": ok}


def _books(failing: list[dict[str, Any]]) -> Books:
    return Books([], Counter(), Counter(),
                 [], failing)


def test_a_fault_under_way_explains_a_duplicate_that_began_after_its_injection() -> None:
    # attempt 0 fails 500 ms after the disk filled; its send-back is refused, so attempt 1 is
    # consumed locally and again from %RETRY% once the disk is back
    disk_full = Disruption("disk-full", 10_000, 11_400)
    failing = [_line("g", 7, 0, 10_500), _line("g", 7, 1, 15_500), _line("g", 7, 1, 16_600)]
    assert _books(failing).duplicates_by_cause([disk_full]) == {"disk-full": 1}


def test_a_duplicate_after_every_fault_was_over_is_charged_to_none() -> None:
    over = Disruption("store", 1_000, 2_000)
    failing = [_line("g", 7, 0, 5_000), _line("g", 7, 1, 6_000), _line("g", 7, 1, 7_000)]
    assert _books(failing).duplicates_by_cause([over]) == {"none": 1}


def test_a_consumer_crash_wins_over_other_faults_under_way() -> None:
    faults = [Disruption("redis", 900, 1_200), Disruption(CONSUMER_FAULT, 1_500, 17_000)]
    failing = [_line("g", 3, 0, 1_000, ok=True), _line("g", 3, 0, 18_000, ok=True)]
    assert _books(failing).duplicates_by_cause(faults) == {CONSUMER_FAULT: 1}


def test_a_fault_is_charged_the_lateness_of_what_fell_due_around_it() -> None:
    # SPEC D10: lateness = the delivered copy's store time - its deliver time; a fault is
    # charged what fell due from a second before its injection until its part was back
    store = Disruption("store", 10_000, 12_000)
    redis = Disruption("redis", 20_000, 20_500)
    delivered = [
        (10_000 - LATENESS_LEAD_MS - 1, 9_100),  # due before the window: not charged
        (9_500, 12_300),    # due just before the kill, delivered after it: 2,800
        (11_000, 12_250),   # due during the outage: 1,250
        (12_400, 12_450),   # due once the store was back: not charged
        (20_100, 20_700),   # redis: 600
    ]
    assert max_lateness([store, redis], delivered) == [2_800, 600]
    assert max_lateness([Disruption("retry", 30_000, 31_000)], delivered) == [None]
