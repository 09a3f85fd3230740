"""The pages' view of store shards (DEC-store-shards, DEC-console-shards), pure (no Flask, no
I/O): the shards table and its totals from ``GET /v1/cluster``, the timers and delay levels of
every shard summed with each shard's own, a group's lag and a topic's queues as (shard,
queueId) rows. A shard that did not answer is a row that says so and makes the figures
``partial``; it is never left out nor counted as zero (DEC-console-honest-lists).

With one store none of this changes what a page shows: the rows carry shard 0 and the
templates show no shard column."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from clepsydra_client.admin import LevelStatus
from clepsydra_core.wire.cluster import UNREACHABLE, ClusterAnswer, RouteAnswer, ShardStatus
from clepsydra_core.wire.timers import HourCount, Lateness, TimerBacklog

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ShardRead(Generic[T]):
    """One shard's answer to a read asked of every shard: ``value``, or ``error`` (why it
    could not be read)."""

    shard: int
    value: T | None = None
    error: str | None = None


def unread(reads: Iterable[ShardRead[T]]) -> list[int]:
    """The shards whose read failed."""
    return [r.shard for r in reads if r.error is not None]


def partial_text(shards: Sequence[int], what: str = "figures") -> str | None:
    """What a page says when shards did not answer (None when all did)."""
    if not shards:
        return None
    names = ", ".join(str(s) for s in sorted(set(shards)))
    return (f"store shard{'s' if len(set(shards)) > 1 else ''} {names} did not answer: the "
            f"{what} leave out what {'they hold' if len(set(shards)) > 1 else 'it holds'}")


# ---- the shards table on / -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ClusterView:
    """The shards table: every shard's row (unreachable ones too), the totals over the shards
    that answered, and which did not."""

    shards: list[ShardStatus]
    topics: int
    """Topics on the shards (every topic has its queues on every shard: not a sum)."""
    queues: int
    commitlog_bytes: int
    pending_delayed: int
    unconsumed: int
    dead_letters: int
    unreachable: list[int] = field(default_factory=list)

    @property
    def partial(self) -> str | None:
        return partial_text(self.unreachable, "totals")


def cluster_view(answer: ClusterAnswer) -> ClusterView:
    shards = sorted(answer.shards, key=lambda s: s.id)
    up = [s for s in shards if s.state != UNREACHABLE]

    def total(name: str) -> int:
        return sum(getattr(s, name) or 0 for s in up)

    return ClusterView(shards, max((s.topics or 0 for s in up), default=0), total("queues"),
                       total("commitlog_bytes"), total("pending_delayed"), total("unconsumed"),
                       total("dead_letters"), [s.id for s in shards if s.state == UNREACHABLE])


def size_text(n: int | None) -> str:
    """Bytes as a person reads them (``12.3 MiB``)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns at GiB


# ---- timers and levels -----------------------------------------------------------------------

def merge_timers(backlogs: Sequence[TimerBacklog]) -> TimerBacklog | None:
    """The timer backlogs of several shards as one: pending, handed over and each hour's count
    summed, the earliest next due time, and the worst shard's lateness (percentiles of
    different shards do not add up; the page lists each shard's). None for none."""
    if not backlogs:
        return None
    if len(backlogs) == 1:
        return backlogs[0]
    hours: dict[int, int] = {}
    for b in backlogs:
        for hc in b.by_hour_ahead:
            hours[hc.hour] = hours.get(hc.hour, 0) + hc.count
    dues = [b.next_due_at for b in backlogs if b.next_due_at is not None]
    late = [b.lateness for b in backlogs if b.lateness is not None]
    lateness = Lateness(max(x.p50 for x in late), max(x.p99 for x in late),
                        max(x.max for x in late)) if late else None
    return TimerBacklog(pending=sum(b.pending for b in backlogs),
                        by_hour_ahead=[HourCount(h, c) for h, c in sorted(hours.items())],
                        handed_over=sum(b.handed_over for b in backlogs),
                        next_due_at=min(dues) if dues else None, lateness=lateness)


@dataclass(frozen=True, slots=True)
class LevelRow:
    """One delay level over the shards read: messages pending, the earliest next due time, how
    late the oldest due one is (the worst shard's)."""

    level: int
    delay_ms: int
    backlog: int
    next_due: int | None
    lag_ms: int


def level_rows(levels: Sequence[LevelStatus]) -> list[LevelRow]:
    """One shard's delay levels as rows."""
    return [LevelRow(lv.info.level, lv.info.delay_ms, lv.backlog, lv.next_deliver_ts, lv.lag_ms)
            for lv in levels]


def merge_levels(per_shard: Sequence[Sequence[LevelRow]]) -> list[LevelRow]:
    """Each level's row summed over the shards' rows: pending summed, the earliest next due
    time, the worst lag."""
    rows: dict[int, LevelRow] = {}
    for levels in per_shard:
        for lv in levels:
            known = rows.get(lv.level)
            if known is None:
                rows[lv.level] = lv
                continue
            dues = [d for d in (known.next_due, lv.next_due) if d is not None]
            rows[lv.level] = LevelRow(lv.level, lv.delay_ms, known.backlog + lv.backlog,
                                      min(dues) if dues else None, max(known.lag_ms, lv.lag_ms))
    return [rows[k] for k in sorted(rows)]


@dataclass(frozen=True, slots=True)
class ShardTimers:
    """One shard's line on /timers: its timer backlog and its level messages pending, or why
    they could not be read."""

    shard: int
    timers: TimerBacklog | None
    level_pending: int | None
    error: str | None = None


def shard_timers(timers: Sequence[ShardRead[TimerBacklog]],
                 levels: Sequence[ShardRead[list[LevelRow]]]) -> list[ShardTimers]:
    by_levels = {r.shard: r for r in levels}
    out = []
    for t in sorted(timers, key=lambda r: r.shard):
        lv = by_levels.get(t.shard)
        pending = sum(x.backlog for x in lv.value) if lv is not None and lv.value is not None \
            else None
        error = t.error or (lv.error if lv is not None else None)
        out.append(ShardTimers(t.shard, t.value, pending, error))
    return out


# ---- queues as (shard, queueId) ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueueRow:
    """A topic's queue on a shard; ``reachable`` False: its shard did not answer (no
    offsets)."""

    shard: int
    queue_id: int
    min_offset: int | None
    max_offset: int | None
    reachable: bool = True


def route_rows(route: RouteAnswer) -> list[QueueRow]:
    return [QueueRow(q.shard, q.queue_id, q.min_offset if q.reachable else None,
                     q.max_offset if q.reachable else None, q.reachable)
            for q in sorted(route.queues, key=lambda q: (q.shard, q.queue_id))]


def route_partial(route: RouteAnswer) -> str | None:
    """What the topic page says when the route could not look on every shard."""
    parts = []
    if route.unreachable:
        parts.append(partial_text(route.unreachable, "queue offsets") or "")
    if route.missing:
        parts.append("store shard(s) " + ", ".join(map(str, route.missing)) + " answered "
                     "without this topic (a create they missed: run it again)")
    return "; ".join(parts) or None


@dataclass(frozen=True, slots=True)
class LagRow:
    """A group's queue: its end offset, the committed offset, the lag, the owner the consumers
    compute; ``reachable`` False: its shard did not answer (no lag is shown, none is
    guessed)."""

    topic: str
    shard: int
    queue_id: int
    max_offset: int | None
    committed: int | None
    owner: str | None
    reachable: bool = True

    @property
    def lag(self) -> int | None:
        if not self.reachable or self.max_offset is None:
            return None
        return self.max_offset - (self.committed if self.committed is not None else 0)
