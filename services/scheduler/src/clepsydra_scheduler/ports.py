"""What the delivery core needs from the outside, as values and protocols (no framework here).

The store side is the store's schedule hand-over routes (docs/contracts.md), whose values are
``clepsydra_core.wire.schedule``'s: ``GET /v1/schedule/levels``, ``GET .../entries`` and
``POST .../handover`` (``HandoverApi``). The Redis side is the level's lease, its progress
offset and its statistics (``LevelState``). ``delivery.py`` codes against these protocols;
``handover_client.py`` and ``level_state.py`` implement them (with in-memory twins for tests).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

from clepsydra_core.errors import ClepsydraError, Fenced
from clepsydra_core.wire.schedule import HandoverAnswer, LevelInfo, LevelTable, ScheduleEntries


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

    @property
    def fenced(self) -> bool:
        """The store refused the call's fencing token as older than one it has seen: a newer
        lease holder exists, or this worker's Redis lost its fence counter
        (DEC-scheduler-lease)."""
        return self.error_code == Fenced.code


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who takes a lease (DEC-scheduler-lease): ``name`` is the worker's stable identity (its
    pod or host and its worker id, the same across a restart of the same pod or ``make run``
    slot); ``incarnation`` numbers its processes (a counter in Redis, never below Redis's clock
    in microseconds, taken once per process), so a later process of the same name takes the
    earlier one's leases over at once, also after Redis lost its data."""

    name: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class LeaseToken:
    """A lease's value in Redis, and the token of the run that holds it:
    ``2 <incarnation> <fence> <run> <name>``, space-separated, the name last (it may hold any
    character but a line break). ``fence`` is the fencing token the store checks (a counter in
    Redis per level, one more for each lease taken); ``run`` tells the runs of one process
    apart. Older workers wrote a bare random token: :meth:`decode` gives None for it, and such
    a lease is only ever taken once it expired. The Lua scripts of ``level_state.py`` write
    this same layout."""

    incarnation: int
    fence: int
    run: str
    name: str
    VERSION: ClassVar[str] = "2"
    _LAYOUT: ClassVar[re.Pattern[str]] = re.compile(r"2 (\d+) (\d+) (\S+) (.+)")

    def encode(self) -> str:
        return f"{self.VERSION} {self.incarnation} {self.fence} {self.run} {self.name}"

    @classmethod
    def decode(cls, raw: str) -> Self | None:
        match = cls._LAYOUT.fullmatch(raw)
        if match is None:
            return None
        return cls(int(match[1]), int(match[2]), match[3], match[4])

    @property
    def holder(self) -> WorkerIdentity:
        return WorkerIdentity(self.name, self.incarnation)

    @staticmethod
    def new_run() -> str:
        """A new ``run``: an id a run writes in the lease it takes."""
        return secrets.token_hex(6)


def fence_of(token: str) -> int | None:
    """The fencing token inside a lease token (None: an older worker's bare token)."""
    decoded = LeaseToken.decode(token)
    return None if decoded is None else decoded.fence


class LevelStateUnavailable(ClepsydraError):
    """The offset store (Redis) did not answer; a run stops delivering until it does."""

    code = "SERVICE_UNAVAILABLE"
    http_status = 503


class HandoverApi(Protocol):
    """The store's schedule hand-over routes. Every method raises StoreCallFailed when the
    store fails or cannot be reached."""

    def levels(self) -> list[LevelInfo]: ...

    def table(self) -> LevelTable:
        """The whole level table (``levels()`` and the timers' fence)."""
        ...

    def entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries: ...

    def handover(self, level: int, from_offset: int, max_count: int,
                 headers: dict[str, str] | None = None,
                 fence: int | None = None) -> HandoverAnswer:
        """``fence``: the caller's lease's fencing token; an older one than the store has
        seen is refused (StoreCallFailed with ``fenced``)."""
        ...

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

    def incarnation(self) -> int:
        """A new incarnation number for a worker process (taken once per process)."""
        ...

    def acquire(self, level: int, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None:
        """Take the level's lease for ``worker`` and return its new token (with the next
        fencing token), when it is free, held by ``previous`` (the token a chained run hands
        its successor), or held by an older incarnation of ``worker``'s name (its process was
        restarted: no wait for the expiry; DEC-scheduler-lease). None when another holds it.
        ``run`` is the id the token gets (a new one when None). A take tried again with the
        same ``run`` after Redis went away before answering finds the lease its first try took,
        and gets that token back (DEC-scheduler-chain-rides-out)."""
        ...

    def refence(self, level: int, token: str, floor: int, ttl_ms: int) -> str | None:
        """While ``token`` holds the lease: raise the level's fence counter to at least
        ``floor`` (the store's newest) and return the token with the next fence. None when the
        lease is someone else's."""
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
