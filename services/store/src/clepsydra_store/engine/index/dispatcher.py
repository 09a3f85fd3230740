"""Dispatch: what follows a record into the indexes, synchronously under the writer lock —
its ConsumeQueue entry, its keys in the key index, and the level's handed-over mark when it
carries ``SCHEDULE_OFFSET`` (SPEC D9: the mark is exactly as durable as the append, and
recovery re-derives it by re-dispatching from the checkpoint). Timers (SPEC T1) likewise: a
parked timer's pair goes into the timer index, a timer's hand-over copy (``SCHEDULE_OFFSET``
``0:<q>``) and a cancel tombstone (``CANCEL_OF``) set their entry's state.

A placed record's mark (``Prepared.mark``, ``marks.py``) says which of these it is, so live
dispatch does not parse properties; recovery reads the same mark and entry code back from the
stored record (:func:`replayed_entry`).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import CommitLogRecord, tags_code
from clepsydra_store.engine.config import DEFAULT_KEY_INDEX_ENTRIES_PER_FILE
from clepsydra_store.engine.index.arrivals import Arrivals
from clepsydra_store.engine.index.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.index.entry_states import CANCELLED, DELIVERED, EntryStates
from clepsydra_store.engine.index.key_index import KeyIndex, key_hash, record_keys
from clepsydra_store.engine.index.marks import (
    PARKED,
    PARKED_TIMER,
    TIMER_LEVEL,
    Mark,
    cancel_kind,
    entry_code,
    parse_schedule_offset,
)
from clepsydra_store.engine.index.timer_index import TimerIndex, TimerPoint
from clepsydra_store.engine.log.flush import IndexPoint
from clepsydra_store.engine.log.segment import Segment

logger = logging.getLogger(__name__)

def replayed_entry(record: CommitLogRecord, levels: DelayLevels) -> tuple[int, Mark | None]:
    """(ConsumeQueue code, Mark) of a stored record: what its ``Prepared`` carried when it was
    placed live, read back from its topic, queue and properties (recovery, SPEC P3), through
    the writer's :func:`~clepsydra_store.engine.index.marks.entry_code`."""
    props = record.properties
    topic = record.topic
    stored_at = record.store_timestamp
    if topic == naming.SCHEDULE_TOPIC:  # S2: the deliver time
        level = levels.level_of_queue(record.queue_id)
        return entry_code(0, levels.delay_ms(level), stored_at), None
    if topic == naming.TIMER_TOPIC:
        if record.queue_id == naming.TIMER_LOG_QUEUE:
            return entry_code(*_timer_asked(props), stored_at), PARKED
        target = parse_schedule_offset(props.get(P.CANCEL_OF))
        if target is not None and target[0] >= 0:
            return 0, (cancel_kind(target[0]), target[1])
        return 0, None
    mark = parse_schedule_offset(props.get(P.SCHEDULE_OFFSET))
    return tags_code(props.get(P.TAGS)), mark if mark is not None and mark[0] >= 0 else None


def _timer_asked(props: dict[str, str]) -> tuple[int, int]:
    """(code, delay_ms) a parked timer's ``Prepared`` carried (``routing.park_timer``), read
    back from its ``DELIVER_AT`` or ``DELAY_MS``; unreadable: due at its store time (the
    hand-over then parks it, D7)."""
    try:
        at = props.get(P.DELIVER_AT)
        if at is not None:
            return int(at), -1
        return 0, int(props.get(P.DELAY_MS) or 0) or -1
    except ValueError:
        return 0, -1


class _Pending(NamedTuple):
    states: dict[ConsumeQueue, dict[int, int]]
    unlinks: list[int]
    timers: TimerPoint


class Dispatcher:
    """Owns the ConsumeQueues, the key index and the handed-over marks."""

    def __init__(self, consumequeue_dir: Path, index_dir: Path, entries_per_file: int,
                 delay_levels: DelayLevels, *,
                 key_index_entries: int = DEFAULT_KEY_INDEX_ENTRIES_PER_FILE,
                 timer_dir: Path | None = None) -> None:
        self.consumequeue_dir = consumequeue_dir
        self.entries_per_file = entries_per_file
        self.delay_levels = delay_levels
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._create_lock = threading.Lock()
        self.key_index = KeyIndex(index_dir, entries_per_file=key_index_entries)
        self.handed_over: dict[int, int] = {}
        """level -> highest schedule queue offset handed to a real topic (D9)."""
        self.states = EntryStates()
        self.timers = TimerIndex(timer_dir or index_dir.parent / naming.TIMER_SLOTS_DIR)
        self.arrivals = Arrivals()
        """Pulls held until their queue has an append (DEC-pull-hold): woken by :meth:`dispatch`."""
        self._replay: dict[ConsumeQueue, tuple[int, list[bytes]]] = {}
        self._replay_hashes: list[int] = []
        self._replay_offsets: list[int] = []
        self._replay_marks: list[tuple[Mark, int, int]] = []
        self.replay_known: set[str] = set()
        self.replay_since: dict[str, int] = {}
        """topic -> CommitLog offset it was created at: older records of that name belong to
        a topic deleted since (TopicConfig.since)."""

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The ConsumeQueue of (topic, queue_id), opened (or created) on first use."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            with self._create_lock:  # readers (schedule_entries) may open one too
                cq = self.queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(self.consumequeue_dir / topic / str(queue_id), topic,
                                      queue_id, self.entries_per_file)
                    self.queues = {**self.queues, key: cq}
        return cq

    def existing_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def mark(self, level: int) -> int:
        return self.handed_over.get(level, -1)

    def raise_mark(self, level: int, queue_offset: int) -> None:
        if level == TIMER_LEVEL:
            self.states.set(self.timer_log(), queue_offset, DELIVERED)
        elif queue_offset > self.handed_over.get(level, -1):
            self.handed_over[level] = queue_offset

    def timer_log(self) -> ConsumeQueue:
        return self.queue(naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE)

    def schedule_queue(self, level: int) -> ConsumeQueue:
        """The entries of ``level`` (0: the timer log)."""
        if level == TIMER_LEVEL:
            return self.timer_log()
        return self.queue(naming.SCHEDULE_TOPIC, self.delay_levels.queue_id(level))

    def apply_mark(self, mark: Mark, queue_offset: int, code: int) -> None:
        """What a placed record's mark says (live dispatch); ``queue_offset`` and ``code`` are
        the record's own entry's."""
        kind, target = mark
        if kind >= TIMER_LEVEL:
            self.raise_mark(kind, target)
        elif kind == PARKED_TIMER:
            self.timers.add(queue_offset, code)
        else:
            self.states.set(self.schedule_queue(-1 - kind), target, CANCELLED)

    # ---- placing (live and recovery) ---------------------------------------------------------
    def dispatch(self, entries: Iterable[tuple[ConsumeQueue, int, bytes]], key_hashes: list[int],
                 key_offsets: list[int], marks: Iterable[tuple[Mark, int, int]], *,
                 replay: bool = False) -> None:
        """Place dispatched records, live (``Writer.append``) and at recovery
        (:meth:`finish_replay`) alike: ConsumeQueue entries (``(queue, first queue offset,
        packed entries)``), key hashes with their records' CommitLog offsets, then each record's
        mark ``(mark, its queue offset, its entry's code)`` (:meth:`apply_mark`). ``replay``:
        the records may have been indexed before the crash (keys at or below the key index's
        last offset are skipped; entries and marks are idempotent)."""
        arrivals = self.arrivals
        for cq, first, packed in entries:
            cq.write(first, packed)
            if arrivals.waiting:  # a pull held on this queue wakes (DEC-pull-hold)
                arrivals.notify(cq.topic, cq.queue_id)
        index = self.key_index
        if key_hashes:
            if replay and key_offsets[0] <= index.last_offset:
                cut = bisect_right(key_offsets, index.last_offset)
                key_hashes, key_offsets = key_hashes[cut:], key_offsets[cut:]
            index.add_many(key_hashes, key_offsets)
        index.write_pending()
        self.apply_marks(marks)

    def apply_marks(self, marks: Iterable[tuple[Mark, int, int]]) -> None:
        """:meth:`apply_mark` of each ``(mark, its record's queue offset, its code)``, a batch
        at a time: a level's hand-over marks (D9) raise its handed-over mark once, to the
        highest entry the batch hands over (DEC-drain-splice-shapes: a drain's batch of
        thousands raised it one record at a time); timer hand-overs, parked timers and
        cancels one by one."""
        top: dict[int, int] = {}
        get = top.get
        apply_mark = self.apply_mark
        for mark, queue_offset, code in marks:
            kind, target = mark
            if kind > TIMER_LEVEL:
                if target > get(kind, -1):
                    top[kind] = target
            else:
                apply_mark(mark, queue_offset, code)
        for level, target in top.items():
            self.raise_mark(level, target)

    def redispatch(self, record: CommitLogRecord, size: int) -> None:
        """Dispatch one recovered record again, as it was placed live (:func:`replayed_entry`
        gives the code and mark its ``Prepared`` carried); gathered, then placed by
        :meth:`dispatch` at :meth:`finish_replay` (idempotent: its entry goes at byte
        20·queueOffset; keys already indexed are skipped; marks only rise)."""
        topic = record.topic
        if topic not in self.replay_known or record.commitlog_offset < self.replay_since.get(
                topic, 0):
            return  # topic deleted since (and perhaps created anew)
        code, mark = replayed_entry(record, self.delay_levels)
        cq = self.queue(topic, record.queue_id)
        packed = ENTRY.pack(record.commitlog_offset, size, code)
        pending = self._replay.get(cq)
        if pending is not None and pending[0] + len(pending[1]) == record.queue_offset:
            pending[1].append(packed)
        else:
            if pending is not None or len(self._replay) >= 256:
                self.finish_replay()
            self._replay[cq] = (record.queue_offset, [packed])
        if mark is not None:
            self._replay_marks.append((mark, record.queue_offset, code))
        for key in record_keys(record.properties):
            self._replay_hashes.append(key_hash(key))
            self._replay_offsets.append(record.commitlog_offset)

    def finish_replay(self) -> None:
        """Place what :meth:`redispatch` gathered."""
        entries = [(cq, first, b"".join(parts)) for cq, (first, parts) in self._replay.items()]
        hashes, offsets, marks = self._replay_hashes, self._replay_offsets, self._replay_marks
        self._replay = {}
        self._replay_hashes, self._replay_offsets, self._replay_marks = [], [], []
        self.dispatch(entries, hashes, offsets, marks, replay=True)

    # ---- durability / retention ------------------------------------------------------------
    def snapshot(self) -> IndexPoint:
        """What this flush makes durable (writer lock held, ``log/flush.py``): the marks and
        queue ranges for the checkpoint, the entry states to write, the emptied timer slots to
        unlink after it."""
        return IndexPoint(dict(self.handed_over), self.ranges(),
                          _Pending(self.states.take(), self.timers.take_unlinks(),
                                   self.timers.take()))

    def make_durable(self, point: IndexPoint) -> None:
        """After the CommitLog fsync: the sentinels of records at or below the checkpointed
        offset written (entry_states.py), then every index file fsync'd."""
        assert isinstance(point.pending, _Pending)
        self.states.apply(point.pending.states)
        self.timers.make_durable(point.pending.timers)  # DEC-timer-pair-journal
        self.flush()

    def checkpointed(self, point: IndexPoint) -> None:
        """After the checkpoint: the timer slots it covers the emptying of go."""
        assert isinstance(point.pending, _Pending)
        self.timers.unlink(point.pending.unlinks)

    def flush(self) -> None:
        """fsync every ConsumeQueue file written since the last flush, and the key index."""
        for cq in list(self.queues.values()):
            cq.fsync()
        self.key_index.fsync()

    def ranges(self) -> dict[str, dict[int, tuple[int, int]]]:
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for (topic, queue_id), cq in list(self.queues.items()):
            out.setdefault(topic, {})[queue_id] = (cq.min_offset, cq.max_offset)
        return out

    def drop_below(self, commitlog_min: int) -> list[Segment]:
        removed: list[Segment] = []
        for (topic, _), cq in list(self.queues.items()):
            removed += cq.drop_below(commitlog_min, any_order=topic == naming.TIMER_TOPIC)
        self.key_index.drop_below(commitlog_min)
        return removed

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        with self._create_lock:
            gone = [cq for (t, _), cq in self.queues.items() if t == topic]
            self.queues = {k: v for k, v in self.queues.items() if k[0] != topic}
        return gone

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.key_index.close()
        self.timers.close()
