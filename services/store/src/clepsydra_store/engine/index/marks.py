"""What a record does to the indexes beyond its own entry (its :data:`Mark`), and the code its
ConsumeQueue entry gets once its store timestamp is known (:func:`entry_code`): decided here
once for live appends (the writer, from a ``Prepared``) and for recovery (the dispatcher, read
back from the stored record).

A mark is ``(kind, target)``: ``(level >= 1, q)`` hands over entry q of that level (SPEC D9),
``(TIMER_LEVEL, q)`` timer-log entry q (T2), ``(PARKED_TIMER, 0)`` is a parked timer (its pair
goes into the timer index, T1), ``(cancel_kind(level), q)`` cancels entry q of a level (0: the
timer log). The ``SCHEDULE_OFFSET`` and ``CANCEL_OF`` properties carry the level and entry as
``"<level>:<queue offset>"`` (:func:`schedule_offset`, :func:`parse_schedule_offset`).
"""

from __future__ import annotations

from clepsydra_store.engine.types import TIMER_LEVEL

Mark = tuple[int, int]
PARKED_TIMER = -(1 << 30)
"""Mark kind of a parked timer record: its pair goes into the timer index."""
PARKED: Mark = (PARKED_TIMER, 0)
"""The mark of every parked timer record."""


__all__ = ["PARKED", "PARKED_TIMER", "TIMER_LEVEL", "Mark", "cancel_kind", "entry_code",
           "parse_schedule_offset", "schedule_offset"]


def cancel_kind(level: int) -> int:
    """Mark kind of a tombstone cancelling an entry of ``level`` (0: the timer log)."""
    return -1 - level


def entry_code(code: int, delay_ms: int, store_timestamp: int) -> int:
    """The ConsumeQueue code of a record stored at ``store_timestamp`` whose ``Prepared`` says
    ``(code, delay_ms)``: ``delay_ms`` 0, ``code`` as it is (the tags' hash, S2); > 0, a
    schedule entry's deliver time, store time + delay (S2); < 0, a timer's deliver time,
    ``code`` (its asked time, 0 for a delay) but never before its store time (T1: a time in the
    past delivers now)."""
    if not delay_ms:
        return code
    return store_timestamp + delay_ms if delay_ms > 0 else max(code, store_timestamp)


def schedule_offset(level: int, queue_offset: int) -> str:
    """``SCHEDULE_OFFSET`` of the copy handed over from entry ``queue_offset`` of ``level``
    (0: the timer log), and ``CANCEL_OF`` of a tombstone, SPEC D9."""
    return f"{level}:{queue_offset}"


def parse_schedule_offset(value: str | None) -> Mark | None:
    """``"<level>:<queueOffset>"`` -> (level, queue_offset); None when absent or malformed."""
    if not value:
        return None
    level, sep, queue_offset = value.partition(":")
    try:
        return (int(level), int(queue_offset)) if sep else None
    except ValueError:
        return None
