"""Delivery times of timer messages (SPEC T1): what the SDK and the ``clepsydra``
command accept, turned into the wire's epoch milliseconds, in one place.

- An instant: an aware ``datetime``, or epoch milliseconds (``int``); on the command line
  ISO-8601 with ``Z`` or an offset (``2027-01-01T09:00Z``, ``2027-01-01T10:00:00+01:00``) or
  epoch milliseconds. A naive ``datetime`` (or an ISO text without zone) is refused: it is
  ambiguous (local time or UTC? on which machine? a local time can fall in a DST gap or fold),
  and a timer that fires an hour off is worse than an error.
- A delay: a ``timedelta``, or milliseconds (``int``); on the command line a number with a unit,
  ``500ms 90s 15m 2h 3d``, or several of them (``1h30m``), each part read by
  ``clepsydra_core.levels.duration_ms`` as the store reads its duration settings. A bare number
  is refused here: on a command line, ``--in 90`` is too easily meant as seconds.

Sub-millisecond parts are rounded up, never down: a timer is never early (T2).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from clepsydra_core import levels

_PART = re.compile(r"[0-9]+(?:ms|s|m|h|d)")
_DURATION = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d))+$")
DURATION_FORMS = "a number with a unit: 500ms, 90s, 15m, 2h, 3d (or several: 1h30m)"
INSTANT_FORMS = ("ISO-8601 with Z or an offset (2027-01-01T09:00Z, 2027-01-01T10:00+01:00), "
                 "or epoch milliseconds")
ONE_MS = timedelta(milliseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_ms(when: datetime | int, name: str = "deliver_at") -> int:
    """Epoch ms of an aware ``datetime`` or of epoch ms; ValueError for a naive datetime, a
    negative number or another type (naming ``name``)."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                f"{name}: a naive datetime is ambiguous (local time or UTC?); give it a zone, "
                "e.g. datetime(2027, 1, 1, 9, tzinfo=UTC), or epoch milliseconds")
        return _ceil_ms(when - EPOCH, name)
    if isinstance(when, bool) or not isinstance(when, int):
        raise ValueError(f"{name} must be an aware datetime or epoch milliseconds (int), "
                         f"got {type(when).__name__}")
    if when < 0:
        raise ValueError(f"{name} must be epoch milliseconds >= 0, got {when}")
    return when


def delay_ms(delay: timedelta | int, name: str = "delay") -> int:
    """Milliseconds of a ``timedelta`` (rounded up) or of an ``int``; ValueError when negative
    or of another type."""
    if isinstance(delay, timedelta):
        return _ceil_ms(delay, name)
    if isinstance(delay, bool) or not isinstance(delay, int):
        raise ValueError(f"{name} must be a timedelta or milliseconds (int), "
                         f"got {type(delay).__name__}")
    if delay < 0:
        raise ValueError(f"{name} must be >= 0 milliseconds, got {delay}")
    return delay


def _ceil_ms(span: timedelta, name: str) -> int:
    """Whole milliseconds of ``span``, rounded up (exact: timedelta counts microseconds)."""
    if span < timedelta(0):
        raise ValueError(f"{name} must not be before 0 (the epoch, or no delay), got {span}")
    whole, rest = divmod(span, ONE_MS)
    return int(whole) + (1 if rest else 0)


def parse_duration_ms(text: str) -> int:
    """``90s`` -> 90000; ``1h30m`` -> 5400000. ValueError saying the accepted forms."""
    compact = text.strip().lower()
    if not _DURATION.match(compact):
        raise ValueError(f"{text!r} is not a duration: give {DURATION_FORMS}")
    return sum(levels.duration_ms(part) or 0 for part in _PART.findall(compact))


def parse_instant_ms(text: str) -> int:
    """ISO-8601 with a zone (``Z`` or an offset), or epoch ms, to epoch ms. ValueError saying
    the accepted forms; a time without zone is refused as ambiguous."""
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give {INSTANT_FORMS}") from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no zone, so it is ambiguous (local time or UTC?): add Z "
                         "for UTC or an offset such as +01:00")
    return instant_ms(when)
