"""The hand-over of due schedule entries to their real topics (SPEC D3-D10; T1, T2 for
timers): one loop for a level's queue and for the timers, a :data:`LOCK_CHUNK` at a time.

Each chunk holds the writer lock while it takes the due entries (a level: from the entry after
its handed-over mark while due, D3, D5, D9; the timers: the timer index's due pairs, earliest
first), makes their copies (``drain.py``: D4, D7), appends them with their marks in one write
(D9: a copy's dispatch raises its entry's mark, so an entry is handed over once) and passes
cancelled entries over; between chunks the lock is given up and the thread yields, so
producers and other levels wait for one chunk at most. The answer covers the whole call, and
with sync flush it is given once the whole call is fsync'd (P2).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from clepsydra_core import naming
from clepsydra_core.errors import ValidationError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.schedule_rules import corrected_deliver_ts, resume_offset
from clepsydra_store.engine.index.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.entry_states import CANCELLED
from clepsydra_store.engine.index.marks import TIMER_LEVEL
from clepsydra_store.engine.index.timer_index import NO_TIMER
from clepsydra_store.engine.schedule.drain import Drain, Due
from clepsydra_store.engine.schedule.fences import Fences
from clepsydra_store.engine.schedule.staging import Staging
from clepsydra_store.engine.types import Delivered, HandoverResult, TimerHandoverResult
from clepsydra_store.engine.write.codec import Prepared
from clepsydra_store.engine.write.writer import Writer

logger = logging.getLogger(__name__)

LOCK_CHUNK = 2_000
"""Most entries one hold of the writer lock hands over: a larger hand-over (up to the wire's
10,000) is done a chunk at a time, the lock given up between chunks (DEC-handover-lock-chunk)."""


@dataclass(slots=True)
class Taken:
    """What one chunk took under the writer lock."""

    due: list[Due] = field(default_factory=list)
    advanced: int = 0
    """Positions the chunk moved over: a level's entries (cancelled ones included), or the
    timers taken."""
    start: int = 0
    next_offset: int = 0
    skipped: int = 0
    cancelled: list[int] = field(default_factory=list)
    """A level's cancelled entries passed over (T2): never handed over; the level's mark is
    raised past them once the chunk is appended."""
    not_due: bool = False
    next_ts: int | None = None
    """The deliver time of the first entry not due (a level, D5), or of the next pending
    timer."""
    handed_over: int = -1
    """A level's handed-over mark after the chunk (D9)."""


@dataclass(slots=True)
class _Run:
    """A whole call: the copies of every chunk, in order."""

    items: list[Prepared] = field(default_factory=list)
    delivered: list[bool] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    stored_at: list[int] = field(default_factory=list)
    """The store timestamp of each copy (its chunk's append)."""
    end: int | None = None
    """The CommitLog end after the last append."""


class Handover:
    """Hands due entries over, a level or the timers, a chunk at a time."""

    def __init__(self, writer: Writer, dispatcher: Dispatcher, drain: Drain,
                 levels: DelayLevels, counters: Counter[str], fences: Fences,
                 staging: Staging) -> None:
        self._writer = writer
        self._fences = fences
        """The newest fencing token of each hand-over, checked by each chunk under the writer
        lock before it reads (DEC-scheduler-lease)."""
        self._disp = dispatcher
        self._drain = drain
        self._levels = levels
        self._counters = counters
        self.staging = staging
        """The timers' copies made before they fall due (DEC-timer-staging)."""
        self._located: dict[int, tuple[int, int]] = {}
        """Timer-log queue offset -> (CommitLog offset, size) of the entries a timers' chunk
        read (writer lock)."""

    def check_level(self, level: int) -> None:
        if not 1 <= level <= self._levels.max_level:
            raise ValidationError(f"delay level {level} is not in 1..{self._levels.max_level}",
                                  rule="L1", code="INVALID_DELAY_LEVEL")

    def admit(self, key: int, fence: int | None) -> None:
        """A hand-over's fencing token checked ahead of its chunks (the timers' long poll, before
        it waits): Fenced when older than one already carried (DEC-scheduler-lease)."""
        self._fences.admit(key, fence)

    def queue(self, level: int) -> ConsumeQueue:
        self.check_level(level)
        return self._disp.queue(naming.SCHEDULE_TOPIC, self._levels.queue_id(level))

    # ---- a level ---------------------------------------------------------------------------
    def level(self, level: int, from_offset: int, max_count: int, now_ms: int,
              fence: int | None = None) -> HandoverResult:
        """Deliver the due entries of ``level`` from the entry after its handed-over mark,
        up to ``max_count`` (D3 correction, D4 rebuild, D5 stop at the first not due, D7 park,
        D9 entries at or below the mark skipped): durable and idempotent. ``from_offset`` is
        where the caller believes it stands (``skipped`` counts the positions from there that
        were handed over already). A ``fence`` older than one a hand-over of the level carried is
        refused (Fenced) before anything is read (DEC-scheduler-lease)."""
        self.check_level(level)
        first: Taken | None = None
        last = Taken()
        asked = from_offset

        def take(want: int) -> Taken:
            nonlocal first, last, asked
            last = self.plan(level, asked, want, now_ms)
            asked = last.next_offset
            if first is None:
                first = last
            return last

        run = self._run(level, take, max_count, fence)
        assert first is not None
        lateness, delivered = _lateness(run)
        parked = len(run.items) - len(lateness)
        counters = self._counters
        counters["schedule_delivered_total"] += len(lateness)
        counters["schedule_parked_total"] += parked
        counters["schedule_skipped_total"] += first.skipped
        if run.items:
            logger.info("schedule handover level=%d from_offset=%d next_offset=%d delivered=%d "
                        "parked=%d skipped=%d", level, first.start, last.next_offset,
                        len(lateness), parked, first.skipped)
        return HandoverResult(level, first.start, last.next_offset, len(lateness), parked,
                              first.skipped, last.not_due, last.next_ts, lateness,
                              last.handed_over, delivered_messages=delivered)

    def continue_offset(self, level: int, cq: ConsumeQueue, from_offset: int) -> int:
        """Where a hand-over asked to start at ``from_offset`` really starts: one entry after
        the level's handed-over mark, whatever the caller names, so that no entry is ever
        skipped (D9 for a position behind the mark; a position ahead of ``mark + 1`` - a
        hostile call, or a scheduler whose saved progress outran a recovered store - starts
        at ``mark + 1`` too), inside the queue (D8)."""
        start = resume_offset(self._disp.mark(level), cq.min_offset, cq.max_offset)
        if from_offset > start:
            logger.warning("hand-over asked to start past entries not handed over level=%d "
                           "from_offset=%d handed_over=%d: starting at %d", level, from_offset,
                           self._disp.mark(level), start)
        return start

    def plan(self, level: int, from_offset: int, max_count: int, now_ms: int) -> Taken:
        """A level's entries from :meth:`continue_offset` on, up to ``max_count``, while due
        (D3, D5); cancelled ones passed over (writer lock)."""
        cq = self.queue(level)
        start = self.continue_offset(level, cq, from_offset)
        taken = Taken(start=start, next_offset=start,
                      skipped=max(0, start - max(from_offset, cq.min_offset)))
        delay_ms = self._levels.delay_ms(level)
        states = self._disp.states.of_queue(cq)  # before the entries (entry_states.py)
        raw = cq.read_raw(start, max(0, max_count))
        for i, (commitlog_offset, size, code) in enumerate(ENTRY.iter_unpack(raw)):
            queue_offset = start + i
            if code == CANCELLED or states.get(queue_offset) == CANCELLED:
                taken.next_offset = queue_offset + 1
                taken.cancelled.append(queue_offset)
                continue
            deliver_ts = corrected_deliver_ts(code, now_ms, delay_ms)  # D3
            if deliver_ts > now_ms:  # D5
                taken.not_due = True
                taken.next_ts = deliver_ts
                break
            taken.next_offset = queue_offset + 1
            taken.due.append((queue_offset, commitlog_offset, size, deliver_ts))
        taken.advanced = taken.next_offset - start
        return taken

    # ---- the timers --------------------------------------------------------------------------
    def timers(self, now_ms: int, max_count: int,
               fence: int | None = None) -> TimerHandoverResult:
        """Hand the due timers over, earliest first, up to ``max_count``: each copy made as a
        level's (D4, D7), appended with its mark (D9: its entry's handed-over sentinel); a stale
        ``fence`` refused as a level's."""
        last = Taken()

        def take(want: int) -> Taken:
            nonlocal last
            last = self._due_timers(now_ms, want)
            return last

        run = self._run(TIMER_LEVEL, take, max_count, fence)
        if len(run.items) < max_count and len(self.staging):  # all due by now_ms taken
            with self._writer.lock:
                self.staging.passed(now_ms)
        lateness, delivered = _lateness(run)
        return TimerHandoverResult(len(lateness), len(run.items) - len(lateness), lateness,
                                   last.next_ts, delivered)

    def stage_timers(self, now_ms: int, clock: Callable[[], int] | None = None,
                     due_ms: int | None = None) -> None:
        """Make the copies of the timers due within the staging window now, a
        :data:`LOCK_CHUNK` at a time under the writer lock (DEC-timer-staging): nothing is
        written, and the hand-over at their due time takes them. Stops once ``clock()`` reaches
        ``due_ms`` (the next timer's time): then handing over comes first."""
        staging = self.staging
        until = now_ms + staging.ahead_ms
        while True:
            want = min(LOCK_CHUNK, staging.room())
            if want <= 0 or (clock is not None and due_ms is not None and clock() >= due_ms):
                break
            with self._writer.lock:
                self._located = {}
                pairs, last = self._disp.timers.upcoming(staging.after(now_ms), until, want,
                                                         self._codes)
                located, self._located = self._located, {}
                entries = [(q, *located[q], deliver_ts) for q, deliver_ts in pairs]
                staging.keep(entries, self._drain.splice_ahead(TIMER_LEVEL, entries), last)
            if last is None or len(pairs) < want:
                break
            time.sleep(0)  # as the hand-over's chunks (LOCK_CHUNK)
        staging.until_ms = until

    def _due_timers(self, now_ms: int, max_count: int) -> Taken:
        """The timer index's due pairs, earliest first, with where their entries are (writer
        lock)."""
        self._located = {}
        due = self._disp.timers.due(now_ms, max_count, self._codes)
        located, self._located = self._located, {}
        entries = [(q, *located[q], deliver_ts) for q, deliver_ts in due]
        return Taken(due=entries, advanced=len(entries))

    def _codes(self, queue_offsets: list[int]) -> list[int | None]:
        """The timer-log entries' tagsCodes now (sentinels included); None past the log. The
        place of each entry read (CommitLog offset, size) is kept in :attr:`_located` for the
        chunk that asked, so its due entries are not read a second time."""
        if not queue_offsets:
            return []
        cq = self._disp.timer_log()
        states = self._disp.states.overrides(cq, queue_offsets)  # before the entries
        low, high = min(queue_offsets), max(queue_offsets)
        located = self._located
        out: list[int | None] = []
        if high - low < 4 * len(queue_offsets) + 256:
            entries = list(ENTRY.iter_unpack(cq.read_raw(low, high - low + 1)))
            count = len(entries)
            override = states.get
            append = out.append
            for q in queue_offsets:
                i = q - low
                if i < count:
                    offset, size, code = entries[i]
                    if size > 0:
                        located[q] = (offset, size)
                        append(override(q, code))
                        continue
                append(None)
            return out
        for q in queue_offsets:
            entry = cq.entry(q)
            if entry is not None and entry.size > 0:
                located[q] = (entry.commitlog_offset, entry.size)
                out.append(states.get(q, entry.tags_code))
            else:
                out.append(None)
        return out

    # ---- the loop ----------------------------------------------------------------------------
    def _run(self, level: int, take: Callable[[int], Taken], max_count: int,
             fence: int | None) -> _Run:
        """Chunks of ``take(want)`` under the writer lock until one takes less than it may,
        stops at an entry not due, or ``max_count`` positions are taken; then (sync flush)
        the wait for the whole call's fsync. Each chunk first admits ``fence``: a newer holder
        of the lease that came in between stops this one (Fenced)."""
        run = _Run()
        advanced = 0
        writer = self._writer
        while True:
            want = min(max_count - advanced, LOCK_CHUNK)
            with writer.lock:
                self._fences.admit(level, fence)
                taken = take(want)
                before = len(run.items)
                self._prepare(level, taken.due, run)
                if len(run.items) > before:
                    stored, run.end = writer.append_copies(run.items[before:])
                    run.stored_at += [stored] * (len(run.items) - before)
                self._settle(level, taken)
            advanced += taken.advanced
            if taken.advanced < want or advanced >= max_count or taken.not_due:
                break
            time.sleep(0)  # let a thread waiting for the writer lock take it (LOCK_CHUNK)
        writer.acknowledge([], run.end)
        return run

    def _prepare(self, level: int, due: list[Due], run: _Run) -> None:
        """The copies of a chunk's ``due`` entries into ``run``, in their order: a timer's
        copy made ahead taken (DEC-timer-staging), the others made by the drain."""
        kept = self.staging.take(due) if level == TIMER_LEVEL and len(self.staging) else None
        if not kept or kept.count(None) == len(kept):
            self._drain.prepare(level, due, run.items, run.delivered, run.traceparents)
            return
        made = _Run()
        self._drain.prepare(level, [e for e, c in zip(due, kept, strict=True) if c is None],
                            made.items, made.delivered, made.traceparents)
        fresh = iter(zip(made.items, made.delivered, made.traceparents, strict=True))
        for copy in kept:
            item, ok, traceparent = (copy[0], True, copy[1]) if copy is not None else next(fresh)
            run.items.append(item)
            run.delivered.append(ok)
            run.traceparents.append(traceparent)

    def _settle(self, level: int, taken: Taken) -> None:
        """After a chunk's append (writer lock): a level's mark raised past the cancelled
        entries it passed over; the timer index told its pairs are handed over."""
        if level != TIMER_LEVEL:
            for queue_offset in taken.cancelled:
                self._disp.raise_mark(level, queue_offset)
            taken.handed_over = self._disp.mark(level)
            return
        timers = self._disp.timers
        timers.confirm()
        taken.next_ts = None if timers.next_due == NO_TIMER else timers.next_due


def _lateness(run: _Run) -> tuple[list[int], list[Delivered]]:
    """D10: store time minus deliver time of each delivered copy, and what the API needs of
    each (O1)."""
    lateness: list[int] = []
    delivered: list[Delivered] = []
    for stored, item, ok, traceparent in zip(run.stored_at, run.items, run.delivered,
                                             run.traceparents, strict=True):
        if ok:
            late = stored - item.deliver_ts
            lateness.append(late)
            delivered.append((item.topic, item.uniq_key, traceparent, late))
    return lateness, delivered
