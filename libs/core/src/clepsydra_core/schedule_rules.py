"""The formulas of SPEC's delivery rules, decided once for every part: the scheduler's due
decision and the store's hand-over (D3, D5), and where delivery of a level resumes (D8, D9) for
the scheduler's progress, the store's hand-over, carry-forward and backlog, and the level
table's answer.

- D3: an entry's deliver time is its tagsCode, corrected to ``now`` when it lies beyond
  ``now + delay(level)`` (the table was shortened since the message was stored)
  (:func:`corrected_deliver_ts`); it is due when that time is ``<= now``.
- D5: delivery stops at the first entry not due (:func:`due_count`).
- D8, D9: the first entry not handed over is the one after the level's handed-over mark, never
  below the queue's minimum (:func:`first_pending`), nor above its maximum
  (:func:`resume_offset`).
"""

from __future__ import annotations

from collections.abc import Sequence


def corrected_deliver_ts(deliver_ts: int, now_ms: int, delay_ms: int) -> int:
    """D3: a deliver time beyond ``now_ms + delay_ms`` means the table was shortened since the
    message was stored: deliver it now."""
    return now_ms if deliver_ts > now_ms + delay_ms else deliver_ts


def due_count(deliver_ts: Sequence[int], now_ms: int, delay_ms: int, limit: int) -> int:
    """How many leading entries are due now, at most ``limit`` (D3; D5: stop at the first one
    not due)."""
    horizon = now_ms + delay_ms
    count = 0
    for ts in deliver_ts:
        if count >= limit or now_ms < ts <= horizon:
            break
        count += 1
    return count


def first_pending(handed_over: int, min_offset: int) -> int:
    """D8, D9: the queue offset of the oldest entry not handed over yet: the one after the
    handed-over mark (-1: none handed over), or the queue's minimum when retention dropped the
    entries before it."""
    return max(handed_over + 1, min_offset)


def resume_offset(handed_over: int, min_offset: int, max_offset: int) -> int:
    """D8, D9: where delivery of a level resumes: :func:`first_pending`, never past the
    queue's maximum (one past its last entry)."""
    return min(first_pending(handed_over, min_offset), max_offset)
