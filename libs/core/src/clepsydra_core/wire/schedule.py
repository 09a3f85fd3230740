"""The store's schedule hand-over routes (SPEC D3-D10; docs/contracts.md), spoken by the store,
the scheduler and the client's admin commands:

- ``GET /v1/schedule/levels`` -> :class:`LevelTable`
- ``GET /v1/schedule/levels/{level}/entries?offset=&max=`` -> :class:`ScheduleEntries`
- ``POST /v1/schedule/levels/{level}/handover`` :class:`HandoverRequest` -> :class:`HandoverAnswer`
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.schedule_rules import first_pending
from clepsydra_core.wire.codec import WireValue, wire_meta

DEFAULT_ENTRIES = 100
MAX_ENTRIES = 10_000
"""Most deliver timestamps one entries call returns."""
MAX_HANDOVER = 10_000
"""Most entries one hand-over call takes."""
MAX_FENCE = (1 << 53) - 1
"""Largest fencing token: exact in a double (the lease scripts' Lua numbers, JSON readers)."""
FENCE_DOC = ("The caller's fencing token (its lease's, DEC-scheduler-lease): refused with 409 "
             "FENCED when older than one a hand-over already carried; absent: not checked")
FENCE_SEEN_DOC = ("The newest fencing token a hand-over carried since the store started "
                  "(null: none yet)")


@dataclass(frozen=True, slots=True)
class LevelInfo(WireValue):
    """One delay level of the store's schedule topic."""

    level: int
    delay_ms: int
    queue_id: int
    min_offset: int
    max_offset: int
    """One past the last entry (the next queue offset to be written)."""
    handed_over: int
    """Highest queue offset already handed to a real topic, -1 if none (SPEC D9)."""
    fence: int | None = field(default=None, metadata=wire_meta(doc=FENCE_SEEN_DOC))
    """The newest fencing token a hand-over of this level carried since the store started
    (null: none yet); a hand-over with an older one is refused, 409 FENCED."""

    @property
    def first_pending(self) -> int:
        """The queue offset of the oldest entry not yet handed over (D8, D9)."""
        return first_pending(self.handed_over, self.min_offset)

    @property
    def backlog(self) -> int:
        """Entries stored but not yet handed over to their real topic."""
        return max(self.max_offset - self.first_pending, 0)


@dataclass(frozen=True, slots=True)
class LevelTable(WireValue):
    levels: list[LevelInfo]
    timer_fence: int | None = field(default=None, metadata=wire_meta(doc=FENCE_SEEN_DOC))
    """As ``LevelInfo.fence``, for the timers' hand-over."""


@dataclass(frozen=True, slots=True)
class ScheduleEntries(WireValue):
    """Deliver timestamps (tagsCode) of a level's entries ``queue_offset, queue_offset+1, ...``
    (an offset below the queue's minimum reads from the minimum)."""

    level: int
    queue_offset: int
    deliver_ts: list[int]
    min_offset: int
    max_offset: int
    handed_over: int
    """Highest queue offset of this level already handed to a real topic, -1 if none (durable,
    recovered from the CommitLog; SPEC D9)."""


@dataclass(frozen=True, slots=True)
class HandoverRequest(WireValue):
    """Hand over up to ``max_count`` due entries. The store continues after the level's
    handed-over mark whatever ``from_offset`` says (SPEC D9): it only tells the store where
    the caller believes it stands."""

    from_offset: int = field(metadata=wire_meta(minimum=0))
    max_count: int = field(default=DEFAULT_ENTRIES,
                           metadata=wire_meta(json="max", minimum=1, maximum=MAX_HANDOVER))
    fence: int | None = field(default=None, metadata=wire_meta(minimum=0, maximum=MAX_FENCE,
                                                              doc=FENCE_DOC))
    """The lease's fencing token (DEC-scheduler-lease); None: not checked (an older caller)."""


@dataclass(frozen=True, slots=True)
class HandoverAnswer(WireValue):
    """The store's answer to a hand-over (SPEC D4, D5, D7, D9, D10)."""

    level: int
    from_offset: int
    """Where the store really started: the entry after its handed-over mark."""
    next_offset: int
    """Where the level's progress should now stand."""
    delivered: int
    parked: int
    """Moved to %SCHEDULE_ERROR% (D7)."""
    skipped: int
    """Already handed over before (a replay after a crash): not written again (D9)."""
    not_due: bool
    """Stopped at an entry that is not due yet (D5); ``next_deliver_ts`` is its time."""
    next_deliver_ts: int | None
    lateness_ms: list[int]
    """Store timestamp of each delivered message minus its deliver time (D10)."""
    handed_over: int
