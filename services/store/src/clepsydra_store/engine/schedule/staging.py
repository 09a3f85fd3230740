"""Timer copies made before their timers fall due (DEC-timer-staging; SPEC T1, D4, D9).

A burst of timers due at one instant is handed over as fast as the one writer makes and appends
their copies, while consumers pull the first ones; making a copy (reading the parked record,
splicing its properties, D4) is about half of a timer's hand-over. The copies depend on nothing
that changes with the clock: the parked record's bytes, its deliver time and its topic's place
(``Prepared`` has no store time, offset or queue offset: the append gives them). So while the
scheduler's call waits for the next due timer (``timers.py``), the timers due within
``ahead_ms`` have their copies made and kept here, by timer-log queue offset; the hand-over at
the due millisecond takes a kept copy instead of making it, and appends it with its mark as
always. Nothing is written ahead: what is handed over, and when, is decided at the due time by
the timer index and the entries' codes, exactly as without this (a timer cancelled or
rescheduled after its copy was made is not due, and its copy is dropped).

A kept copy is used only for the same entry and deliver time, and only while no topic has been
deleted or lost queues since it was made (``TopicRegistry.removals``: its place may be gone;
everything kept is dropped then, and made again at the due time). Copies are kept for at most
:data:`STAGE_MAX` timers (their memory: ~0.7 KiB a copy); those not used by the time they fall
due are dropped after the hand-over that passed them.
"""

from __future__ import annotations

from collections import deque

from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.schedule.drain import Due, Spliced

STAGE_MAX = 100_000
"""Most timers whose copies are kept at once (a burst of 100,000 due in one second)."""
STAGE_STEP_MS = 100
"""The due window is walked again once it has moved this far: a steady stream of timers is
staged a tenth of a second at a time, not on every wake of the waiting call."""

class Staging:
    """The copies made ahead, by timer-log queue offset (the caller holds the writer lock)."""

    def __init__(self, ahead_ms: int, topics: TopicRegistry) -> None:
        self.ahead_ms = ahead_ms
        """``EngineConfig.timer_stage_ahead_ms``; 0: nothing is made ahead."""
        self._topics = topics
        self._removals = topics.removals
        self._copies: dict[int, tuple[int, Spliced]] = {}
        """Timer-log queue offset -> (deliver ts, its copy)."""
        self._order: deque[tuple[int, int]] = deque()
        """(deliver ts, queue offset) of every copy kept, in the order made (due order)."""
        self._cursor: tuple[int, int] = (-1, -1)
        """The last (deliver ts, queue offset) the walk looked at: the next walk starts after."""
        self.until_ms = -1
        """How far the last walk went (deliver times up to this one)."""
        self.made = 0
        self.used = 0

    def __len__(self) -> int:
        return len(self._copies)

    def wants(self, now_ms: int, next_due: int) -> bool:
        """Whether to walk the due window now: the next timer falls due within it and the
        window has moved :data:`STAGE_STEP_MS` since the last walk, with room left."""
        return (self.ahead_ms > 0 and next_due - now_ms <= self.ahead_ms
                and now_ms + self.ahead_ms - self.until_ms >= STAGE_STEP_MS
                and self.room() > 0)

    def next_walk_ms(self, next_due: int) -> int | None:
        """When :meth:`wants` will next say yes (epoch ms), for a caller that waits; None:
        not before copies are taken (off, or no room)."""
        if self.ahead_ms <= 0 or self.room() <= 0:
            return None
        return max(next_due, self.until_ms + STAGE_STEP_MS) - self.ahead_ms

    def after(self, now_ms: int) -> tuple[int, int]:
        """Where the next walk starts: past the last pair looked at, and past the timers due by
        ``now_ms`` (they are the hand-over's now)."""
        return max(self._cursor, (now_ms, 1 << 62))

    def room(self) -> int:
        return STAGE_MAX - len(self._copies)

    def keep(self, due: list[Due], copies: list[Spliced | None],
             last: tuple[int, int] | None) -> None:
        """The copies made for ``due`` entries (None: not made, the hand-over will); ``last``:
        the last pair the walk looked at."""
        self._still_placed()
        for (queue_offset, _, _, deliver_ts), copy in zip(due, copies, strict=True):
            if copy is not None:
                self._copies[queue_offset] = (deliver_ts, copy)
                self._order.append((deliver_ts, queue_offset))
                self.made += 1
        if last is not None:
            self._cursor = max(self._cursor, last)

    def take(self, due: list[Due]) -> list[Spliced | None]:
        """The kept copy of each of ``due`` (None: none kept for that entry and deliver time),
        each given once."""
        copies = self._copies
        if not copies or not self._still_placed():
            return [None] * len(due)
        out: list[Spliced | None] = []
        for queue_offset, _, _, deliver_ts in due:
            kept = copies.pop(queue_offset, None)
            out.append(kept[1] if kept is not None and kept[0] == deliver_ts else None)
        self.used += len(out) - out.count(None)
        return out

    def passed(self, now_ms: int) -> None:
        """A hand-over took every timer due by ``now_ms``: copies kept for them and not taken
        (cancelled, rescheduled) are dropped."""
        order, copies = self._order, self._copies
        while order and order[0][0] <= now_ms:
            copies.pop(order.popleft()[1], None)
        if not copies:
            order.clear()

    def _still_placed(self) -> bool:
        """False (and everything kept dropped) when a topic was deleted or lost queues since
        the copies were made: a copy's place may be gone."""
        if self._topics.removals == self._removals:
            return True
        self.drop()
        return False

    def drop(self) -> None:
        """Everything kept goes (a topic lost its place); the window is walked again."""
        self._copies.clear()
        self._order.clear()
        self._cursor = (-1, -1)
        self.until_ms = -1
        self._removals = self._topics.removals
