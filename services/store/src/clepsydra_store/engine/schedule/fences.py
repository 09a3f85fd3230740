"""Fencing of the scheduler's hand-overs (DEC-scheduler-lease): the newest fencing token each
hand-over -- a delay level, or the timers (``dispatch.TIMER_LEVEL``) -- carried since the store
started. A hand-over carrying an older token is refused (``Fenced``, 409) before anything is
read or written: its caller's lease was taken over by a newer holder, whose calls the store
has already seen.

The check runs under the writer lock, with the append it admits, so a stale holder's call that
reaches the lock after its successor's first one is refused, never interleaved with it. The
handed-over marks keep each entry exactly once whoever calls (SPEC D9); the fence keeps a
superseded holder from delivering at all once its successor has. A call without a token (an
older scheduler) is neither checked nor recorded. The tokens are kept in memory: after a
restart the store admits the first token it sees (the scheduler's Redis lease still fences its
progress, and the marks D9).
"""

from __future__ import annotations

import threading

from clepsydra_core.errors import Fenced
from clepsydra_store.engine.types import TIMER_LEVEL


class Fences:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[int, int] = {}

    def admit(self, key: int, fence: int | None) -> None:
        """Record ``fence`` as ``key``'s newest; Fenced when it is older. Atomic by itself; a
        hand-over calls it under the writer lock, before its append."""
        if fence is None:
            return
        with self._lock:
            newest = self._newest.get(key)
            if newest is not None and fence < newest:
                what = "the timers" if key == TIMER_LEVEL else f"level {key}"
                raise Fenced(f"hand-over of {what} refused: its fencing token {fence} is older "
                             f"than {newest}, which a newer holder of the lease already used")
            self._newest[key] = fence

    def newest(self, key: int) -> int | None:
        """The newest token ``key``'s hand-overs carried since the store started."""
        return self._newest.get(key)
