"""Timer messages' operations (SPEC T1-T2), under the store's writer lock: the scheduler's
waiting hand-over of due timers (the hand-over itself is ``handover.py``'s loop), cancel and
reschedule of any pending delayed message (level or timer), and the timer backlog.

Everything that changes a message's fate is a CommitLog record appended under the writer lock,
so it is as durable as a produce and a recovery re-derives it (``index/dispatcher.py``):

- a hand-over copy carries ``SCHEDULE_OFFSET`` ``0:<q>`` (the timer-log entry q is handed over;
  D9: an entry handed over is never handed over again, whatever the scheduler replays);
- a cancel is a tombstone in ``TIMER_TOPIC_XXXX`` queue 1 with ``CANCEL_OF`` ``<level>:<q>``
  (level 0: the timer log); the hand-over passes a cancelled entry over;
- a reschedule is a tombstone plus a new parked timer record (the message's body and
  properties, ``UNIQ_KEY`` included, so its msgId stays), in one append.

A cancel or reschedule racing the hand-over of the same entry: both take the writer lock, so
exactly one of them happens first, and the second sees it (409 ``ALREADY_DELIVERED`` for a
cancel that came second; a cancelled entry is never handed over).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import AlreadyDelivered, MessageNotFound
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import CommitLogRecord
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.entry_states import CANCELLED, DELIVERED
from clepsydra_store.engine.index.lookup import Copies, Lookup
from clepsydra_store.engine.index.marks import (
    TIMER_LEVEL,
    cancel_kind,
    parse_schedule_offset,
    schedule_offset,
)
from clepsydra_store.engine.index.timer_index import NO_TIMER
from clepsydra_store.engine.schedule.handover import Handover
from clepsydra_store.engine.types import (
    Fate,
    HourCount,
    Lateness,
    Outcome,
    ParkedState,
    TimerBacklog,
    TimerHandoverResult,
)
from clepsydra_store.engine.write.codec import Prepared
from clepsydra_store.engine.write.preparer import Preparer
from clepsydra_store.engine.write.writer import Writer

LATENESS_WINDOW = 10_000
"""Hand-overs the timer backlog's lateness figures are computed over (the most recent)."""
_HOUR_MS = 3_600_000
_SCAN = 65_536


@dataclass(slots=True)
class _Message:
    """One message's schedule entries and their states."""

    msg_id: str
    pending: dict[tuple[int, int], CommitLogRecord] = field(default_factory=dict)
    delivered: bool = False
    cancelled: bool = False


class Timers:
    def __init__(self, writer: Writer, dispatcher: Dispatcher, handover: Handover,
                 preparer: Preparer, levels: DelayLevels, lookup: Lookup,
                 gap_ms: int = 0) -> None:
        self._writer = writer
        self._disp = dispatcher
        self._handover = handover
        self._preparer = preparer
        self._levels = levels
        self._lookup = lookup
        self._lateness: deque[int] = deque(maxlen=LATENESS_WINDOW)
        self.handed_over = 0
        """Timers handed over (delivered or parked) since the store started."""
        self._gap_ms = gap_ms
        """``EngineConfig.timer_handover_gap_ms``."""
        self._last_handed_ms = -gap_ms
        """When the last waiting hand-over that returned timers ran (epoch ms)."""
        self._released = False
        """The store stops (:meth:`release`): no hand-over waits any more."""

    # ---- the long poll -------------------------------------------------------------------
    def handover_wait(self, max_count: int, wait_ms: int, now: Callable[[], int],
                      fence: int | None = None) -> TimerHandoverResult:
        """:meth:`handover`; when nothing is due, wait up to ``wait_ms`` for the next due
        time (or for a timer parked due before it) and try again: the scheduler's call
        returns when there is something to hand over, never early (T1). A run that returns
        timers comes at least ``gap_ms`` after the last one that did, unless that one took a
        full ``max_count`` (DEC-timer-call-interval). A stale ``fence`` is refused at once,
        before any wait (and again by each hand-over, under the writer lock)."""
        self._handover.admit(TIMER_LEVEL, fence)
        deadline = time.monotonic() + wait_ms / 1000
        timers = self._disp.timers
        wake = timers.wake
        while True:
            if self._released:  # the store stops: answer now, nothing handed over
                return TimerHandoverResult()
            wake.clear()
            # no hand-over run while the index knows nothing can be due yet
            # (DEC-timer-handover-gap; a call that came right after the last one, a wait woken
            # before the due millisecond): each run takes the writer lock and reads codes. Read
            # after the clear: add() of an earlier timer lowers next_due, then sets the event.
            next_due = timers.known_next_due
            if next_due == NO_TIMER:
                next_due = None  # known: no timer pending; an add() wakes the wait
            elif next_due is None or max(next_due, self._last_handed_ms + self._gap_ms) <= now():
                at = now()
                result = self.handover(at, max_count, fence)
                if result.delivered or result.parked:
                    # a full batch leaves more due now: a backlog drains without the gap
                    full = result.delivered + result.parked >= max_count
                    self._last_handed_ms = -self._gap_ms if full else at
                    return result
                next_due = result.next_due_at
            staging = self._handover.staging
            if next_due is not None and staging.wants(now(), next_due):
                # the copies of what falls due soon made while nothing is due
                # (DEC-timer-staging); then look again: time has passed
                self._handover.stage_timers(now(), now, next_due)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return TimerHandoverResult(next_due_at=next_due)
            if next_due is not None:
                # until the due millisecond begins, not a millisecond floor past it; a wake
                # a hair early runs nothing (above), so never early (T1)
                # (and not before the gap since the last hand-over has passed), or until the
                # copies of what falls due soon are to be made
                go = max(next_due, self._last_handed_ms + self._gap_ms)
                walk = staging.next_walk_ms(next_due)
                if walk is not None:
                    go = min(go, walk)
                remaining = min(remaining, max(0.0, go / 1000 - time.time_ns() / 1e9))
            wake.wait(remaining)

    def release(self) -> None:
        """The store stops: a waiting hand-over answers now (empty) and none waits again,
        so the graceful stop does not wait out the scheduler's long poll."""
        self._released = True
        self._disp.timers.wake.set()

    def target(self, deliver_at: int | None, delay_ms: int | None) -> int:
        """A reschedule's asked time, checked against the cap (T1; 400 naming it)."""
        return self._preparer.timer_target(deliver_at, delay_ms, time.time_ns() // 1_000_000)

    # ---- by msgId, by key -------------------------------------------------------------------
    def cancel(self, msg_id: str) -> Outcome:
        return self.act({msg_id: self._lookup.by_msg_id(msg_id)}, None)

    def reschedule(self, msg_id: str, deliver_at: int) -> Outcome:
        return self.act({msg_id: self._lookup.by_msg_id(msg_id)}, deliver_at)

    def copies_by_key(self, topic: str, key: str, since: int = 0) -> Copies:
        """msgId -> stored copies of the messages of ``topic`` with ``key`` (T2 by key)."""
        return self._lookup.copies_by_key(topic, key, since)

    # ---- hand-over (D3-D10 for timers) ----------------------------------------------------
    def handover(self, now_ms: int, max_count: int,
                 fence: int | None = None) -> TimerHandoverResult:
        """Hand the due timers over, earliest first, up to ``max_count`` (``handover.py``'s
        loop: each copy spliced or rebuilt, D4, or parked, D7; appended with its mark, D9)."""
        result = self._handover.timers(now_ms, max_count, fence)
        self._lateness.extend(result.lateness_ms)
        self.handed_over += result.delivered + result.parked
        return result

    # ---- cancel / reschedule ----------------------------------------------------------------
    def _state(self, level: int, queue_offset: int) -> tuple[int, int] | None:
        """(code now, CommitLog offset) of a schedule entry; None when it is not there."""
        cq = self._disp.schedule_queue(level)
        override = self._disp.states.override(cq, queue_offset)  # before the entry
        entry = cq.entry(queue_offset)
        if entry is None or entry.size <= 0:
            return None
        code = entry.tags_code if override is None else override
        return code, entry.commitlog_offset

    def parked_states(self, records: Sequence[CommitLogRecord]) -> dict[int, ParkedState]:
        """Where each parked copy among ``records`` stands, by CommitLog offset: pending,
        delivered (handed over) or cancelled (a message's history, DEC-message-history);
        copies that are not parked, or whose entry is gone, are left out."""
        out: dict[int, ParkedState] = {}
        with self._writer.lock:
            for record in records:
                if record.topic not in (naming.SCHEDULE_TOPIC, naming.TIMER_TOPIC):
                    continue
                message = _Message(record.msg_id)
                self._classify([record], message)
                if message.cancelled:
                    out[record.commitlog_offset] = ParkedState.CANCELLED
                elif message.delivered:
                    out[record.commitlog_offset] = ParkedState.DELIVERED
                elif message.pending:
                    out[record.commitlog_offset] = ParkedState.PENDING
        return out

    def cancel_times(self, records: Sequence[CommitLogRecord]) -> dict[int, int]:
        """When each parked copy among ``records`` was cancelled, by CommitLog offset: the store
        timestamp of the tombstone that cancelled its entry, found by the message's id in the
        key index (DEC-message-history). A tombstone stored before the index held them is not
        found: that copy is left out (its cancel has no known time)."""
        entries: dict[tuple[int, int], int] = {}
        for record in records:
            if record.topic == naming.SCHEDULE_TOPIC:
                level = self._levels.level_of_queue(record.queue_id)
            elif record.topic == naming.TIMER_TOPIC and \
                    record.queue_id == naming.TIMER_LOG_QUEUE:
                level = TIMER_LEVEL
            else:
                continue
            entries[(level, record.queue_offset)] = record.commitlog_offset
        out: dict[int, int] = {}
        for msg_id in {r.msg_id for r in records} if entries else ():
            for tombstone in self._lookup.tombstones(msg_id):
                target = parse_schedule_offset(tombstone.properties.get(P.CANCEL_OF))
                parked = entries.get(target) if target is not None else None
                if parked is not None and parked not in out:
                    out[parked] = tombstone.store_timestamp
                if len(out) == len(entries):
                    return out
        return out

    def _classify(self, records: list[CommitLogRecord], message: _Message) -> None:
        """Sort a message's stored copies into its entries' states (caller holds the lock)."""
        for record in records:
            if record.topic == naming.SCHEDULE_TOPIC:
                level = self._levels.level_of_queue(record.queue_id)
            elif record.topic == naming.TIMER_TOPIC:
                if record.queue_id != naming.TIMER_LOG_QUEUE:
                    continue
                level = TIMER_LEVEL
            else:
                message.delivered = True  # a copy in a real topic: handed over (or plain)
                continue
            key = (level, record.queue_offset)
            state = self._state(*key)
            if state is None:
                continue
            code, commitlog_offset = state
            if code == CANCELLED:
                message.cancelled = True
            elif code == DELIVERED or (level != TIMER_LEVEL
                                       and record.queue_offset <= self._disp.mark(level)):
                message.delivered = True
            elif key not in message.pending or commitlog_offset == record.commitlog_offset:
                message.pending[key] = record  # the copy the entry names (carried forward)

    def _tombstone(self, level: int, queue_offset: int, msg_id: str) -> Prepared:
        return Prepared.build(
            naming.TIMER_TOPIC, naming.TIMER_CANCEL_QUEUE, b"",
            {P.CANCEL_OF: schedule_offset(level, queue_offset), P.ORIGIN_MESSAGE_ID: msg_id},
            flag=0, sys_flag=0, born_timestamp=0, born_host=b"\0" * 8, reconsume_times=0,
            mark=(cancel_kind(level), queue_offset),
            max_size=self._preparer.config.segment_size_bytes)

    def act(self, copies: Copies, deliver_at: int | None) -> Outcome:
        """Cancel (``deliver_at`` None) or reschedule the messages whose stored copies are
        ``copies`` (msgId -> records). MessageNotFound when there are none; AlreadyDelivered
        when every one was handed over already; a cancel of messages all cancelled before
        answers cancelled again (idempotent), a reschedule of them MessageNotFound."""
        writer = self._writer
        with writer.lock:
            messages = [_Message(msg_id) for msg_id in copies]
            for message in messages:
                self._classify(copies[message.msg_id], message)
            items: list[Prepared] = []
            acted: list[str] = []
            for message in messages:
                if not message.pending:
                    continue
                acted.append(message.msg_id)
                for (level, queue_offset), record in sorted(message.pending.items()):
                    items.append(self._tombstone(level, queue_offset, message.msg_id))
                    if deliver_at is not None:
                        items.append(self._preparer.reschedule(record, deliver_at))
            if not acted:
                return self._nothing_pending(messages, deliver_at)
            results, end = writer.append(items)
        results = writer.acknowledge(results, end)
        if deliver_at is None:
            return Outcome(Fate.CANCELLED, acted)
        effective = results[-1].deliver_at  # the new timer's, as stored (T1)
        assert effective is not None
        return Outcome(Fate.RESCHEDULED, acted, effective)

    @staticmethod
    def _nothing_pending(messages: list[_Message], deliver_at: int | None) -> Outcome:
        """Nothing pending: an idempotent cancel's answer, or why not (raises)."""
        if not messages:
            raise MessageNotFound("no such message")
        if any(m.delivered for m in messages):
            raise AlreadyDelivered("already handed over to its topic (delivered, or never "
                                   "delayed); nothing was cancelled or rescheduled")
        if deliver_at is not None or not any(m.cancelled for m in messages):
            raise MessageNotFound("no pending delayed message (it was cancelled); nothing "
                                  "was rescheduled")
        return Outcome(Fate.CANCELLED, [m.msg_id for m in messages if m.cancelled])

    # ---- the backlog (GET /v1/schedule/timers) ----------------------------------------------
    def backlog(self, now_ms: int) -> TimerBacklog:
        """Pending timers by hour ahead, the next due time and recent lateness: one pass over
        the timer log (20 bytes a timer, read in chunks; nothing kept per timer)."""
        cq = self._disp.existing_queue(naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE)
        hours: dict[int, int] = {}
        pending = 0
        next_due: int | None = None
        if cq is not None:
            for _, _, _, code in self._disp.states.pending(cq, cq.min_offset, _SCAN):
                pending += 1
                hour = max(code - now_ms, 0) // _HOUR_MS
                hours[hour] = hours.get(hour, 0) + 1
                if next_due is None or code < next_due:
                    next_due = code
        return TimerBacklog(pending, [HourCount(h, n) for h, n in sorted(hours.items())],
                            self.handed_over, next_due, self.lateness())

    def lateness(self) -> Lateness | None:
        recent = sorted(self._lateness)
        if not recent:
            return None
        return Lateness(p50=_rank(recent, 0.50), p99=_rank(recent, 0.99), max=recent[-1])


def _rank(values: list[int], share: float) -> int:
    """The nearest-rank percentile of sorted ``values``."""
    return values[max(0, min(len(values) - 1, int(share * len(values) + 0.5) - 1))]

