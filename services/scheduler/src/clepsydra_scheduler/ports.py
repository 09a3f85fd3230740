"""What the delivery core needs from the outside, as values and protocols (no framework here).

The store side is the store's schedule hand-over routes (docs/contracts.md), whose values are
``clepsydra_core.wire.schedule``'s: ``GET /v1/schedule/levels``, ``GET .../entries`` and
``POST .../handover`` (``HandoverApi``). The Redis side is the level's lease, its progress
offset and its statistics (``LevelState``). ``delivery.py`` codes against these protocols;
``handover_client.py`` and ``level_state.py`` implement them (with in-memory twins for tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.schedule import HandoverAnswer, LevelInfo, ScheduleEntries


class StoreCallFailed(ClepsydraError):
    """The store answered a schedule call with an error, or did not answer (SPEC D6: the
    caller keeps its progress and retries after a back-off)."""

    code = "STORE_CALL_FAILED"
    http_status = 503

    def __init__(self, message: str, *, status: int | None = None,
                 error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code

    @property
    def offset_out_of_range(self) -> bool:
        return self.error_code == "OFFSET_OUT_OF_RANGE"


class LevelStateUnavailable(ClepsydraError):
    """The offset store (Redis) did not answer; a run stops delivering until it does."""

    code = "SERVICE_UNAVAILABLE"
    http_status = 503


class HandoverApi(Protocol):
    """The store's schedule hand-over routes. Every method raises StoreCallFailed when the
    store fails or cannot be reached."""

    def levels(self) -> list[LevelInfo]: ...

    def entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries: ...

    def handover(self, level: int, from_offset: int, max_count: int,
                 headers: dict[str, str] | None = None) -> HandoverAnswer: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LevelSample:
    """What one hand-over taught about a level, recorded in its statistics (SPEC D10)."""

    delivered: int = 0
    parked: int = 0
    skipped: int = 0
    lateness_ms: Sequence[int] = ()
    backlog: int = 0
    """Entries not yet handed over: maxOffset - handedOver - 1."""
    lag_ms: int = 0
    """now - deliverTs of the oldest due entry not yet handed over (0 when none is due)."""
    min_offset: int = 0
    max_offset: int = 0
    handed_over: int = -1
    now_ms: int = 0


class LevelState(Protocol):
    """A level's lease, progress and statistics (Redis in production).

    The lease makes one run the level's only deliverer; ``save`` and ``commit`` write progress
    only while ``token`` still holds the lease (fencing), and say whether they did."""

    def acquire(self, level: int, token: str, ttl_ms: int) -> bool:
        """Take the lease if free, or keep it if ``token`` already holds it."""
        ...

    def renew(self, level: int, token: str, ttl_ms: int) -> bool: ...

    def release(self, level: int, token: str) -> bool: ...

    def load(self, level: int) -> int:
        """The level's progress offset; 0 when none was ever saved (SPEC D2)."""
        ...

    def save(self, level: int, token: str, queue_offset: int) -> bool: ...

    def commit(self, level: int, token: str, queue_offset: int, sample: LevelSample) -> bool:
        """Record the sample's statistics, and save progress if ``token`` holds the lease."""
        ...

    def record(self, level: int, sample: LevelSample) -> None:
        """Record statistics only (gauges on idle iterations)."""
        ...


class Clock(Protocol):
    """Wall time in ms, and an interruptible wait (True when the run must stop)."""

    def now_ms(self) -> int: ...

    def wait(self, timeout_s: float) -> bool: ...

    def stopping(self) -> bool: ...
