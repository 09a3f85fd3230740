"""Carry-forward of undelivered scheduled messages (SPEC P4 "Beyond"): before
retention deletes the CommitLog segments below ``cut``, every schedule entry not yet handed over
whose record lies below ``cut`` gets a copy of that record at the end of the log, and its
ConsumeQueue entry is pointed at the copy. The old segment can then go.

The copy is the stored record byte for byte - same topic (``SCHEDULE_TOPIC_XXXX``), level
queue, queue offset, store timestamp, body, properties (``UNIQ_KEY``, ``REAL_TOPIC``, ...),
born fields - except its own CommitLog offset in the header. So:

- the entry keeps its place in the level's queue and its deliver time (tagsCode): a recovery
  that re-dispatches the copy rewrites the same entry (``store timestamp + delay(level)``,
  at its queue offset), and the scheduler reads the same timestamps;
- D9 holds unchanged: the level's handed-over mark counts queue offsets, the entry is handed
  over once, from whichever record it points at; the old record is simply never read again;
- only the offsetMsgId (store host + CommitLog offset) of the parked copy differs: its msgId,
  the ``UNIQ_KEY`` every copy keeps, is the same. (A record parked before unique
  ids has none: its msgId was its offsetMsgId, so a carried one is delivered with the carried
  copy's.)

The copies' header is the codec's (``codec.relocated_header``) and their entries and keys are
placed by ``Dispatcher.dispatch``, as live appends' and recovery's are. The copies are fsync'd
before any entry is pointed at them, so an entry never names bytes a machine crash could lose;
a crash between the two leaves the old entry, and recovery's re-dispatch of the copy rewrites
it. A record that cannot be read back (corrupt) is not carried: its entry is parked as
unreadable by the hand-over (D7), never silently lost.
The caller holds the writer lock (and the flush lock).

:class:`Retention` is what runs it: whole segments past ``CLEPSYDRA_STORE_RETENTION_HOURS``
(never the active one) deleted once what they hold of pending schedule entries is carried,
then the ConsumeQueue and key index files wholly below the new CommitLog minimum.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

from clepsydra_core import naming
from clepsydra_core.errors import CorruptRecordError, MessageNotFound
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import HEADER_SIZE, decode_record
from clepsydra_core.schedule_rules import first_pending
from clepsydra_store.engine.index.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.key_index import key_hash, record_keys
from clepsydra_store.engine.log.commitlog import CommitLog
from clepsydra_store.engine.log.segment import Segment
from clepsydra_store.engine.write.codec import relocated_header

logger = logging.getLogger(__name__)

_SCAN_ENTRIES = 4096
_CHUNK_BYTES = 16 * 1024 * 1024
"""Records carried per append (bounds the memory a carry holds)."""


@dataclass(frozen=True, slots=True)
class _Pending:
    cq: ConsumeQueue
    queue_offset: int
    commitlog_offset: int
    size: int
    deliver_ts: int


@dataclass(slots=True)
class CarryResult:
    carried: int = 0
    carried_bytes: int = 0
    unreadable: int = 0


class CarryForward:
    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher,
                 levels: DelayLevels) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.levels = levels

    def pending_below(self, cut: int) -> list[_Pending]:
        """Schedule entries not handed over (nor cancelled) whose record starts below ``cut``,
        by CommitLog offset (a carried entry may point past later ones: every pending entry is
        looked at); the timer log's too (SPEC T1: a year-ahead timer outlives retention)."""
        out: list[_Pending] = []
        queues: list[tuple[ConsumeQueue, int]] = []
        for level in self.levels.levels():
            cq = self.dispatcher.existing_queue(naming.SCHEDULE_TOPIC,
                                                self.levels.queue_id(level))
            if cq is not None:
                queues.append((cq, first_pending(self.dispatcher.mark(level),
                                                 cq.min_offset)))
        timer_log = self.dispatcher.existing_queue(naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE)
        if timer_log is not None:
            queues.append((timer_log, timer_log.min_offset))
        for cq, first in queues:
            for queue_offset, commitlog_offset, size, code in self.dispatcher.states.pending(
                    cq, first, _SCAN_ENTRIES):
                if commitlog_offset < cut:
                    out.append(_Pending(cq, queue_offset, commitlog_offset, size, code))
        out.sort(key=lambda p: p.commitlog_offset)
        return out

    def carry(self, cut: int) -> CarryResult:
        """Carry every pending schedule entry below ``cut`` to the end of the log."""
        result = CarryResult()
        chunk: list[tuple[_Pending, bytes]] = []
        chunk_bytes = 0
        for pending in self.pending_below(cut):
            raw = self._read(pending)
            if raw is None:
                result.unreadable += 1
                continue
            chunk.append((pending, raw))
            chunk_bytes += len(raw)
            if chunk_bytes >= _CHUNK_BYTES:
                self._append(chunk, result)
                chunk, chunk_bytes = [], 0
        if chunk:
            self._append(chunk, result)
        if result.carried or result.unreadable:
            logger.info("scheduled messages carried forward before retention cut=%d "
                        "carried=%d bytes=%d unreadable=%d", cut, result.carried,
                        result.carried_bytes, result.unreadable)
        return result

    def _read(self, pending: _Pending) -> bytes | None:
        """The record's bytes when they hold the schedule record the entry names."""
        try:
            raw = self.commitlog.read_bytes(pending.commitlog_offset, pending.size)
            record, total = decode_record(raw, 0)
        except (MessageNotFound, CorruptRecordError) as exc:
            logger.warning("scheduled message not carried forward (unreadable; the hand-over "
                           "parks it, D7) commitlog_offset=%d queue_offset=%d: %s",
                           pending.commitlog_offset, pending.queue_offset, exc)
            return None
        if (total != pending.size or record.commitlog_offset != pending.commitlog_offset
                or record.topic != pending.cq.topic
                or record.queue_offset != pending.queue_offset):
            logger.warning("scheduled message not carried forward (the entry does not match "
                           "its record) commitlog_offset=%d queue_offset=%d",
                           pending.commitlog_offset, pending.queue_offset)
            return None
        return raw

    def _append(self, chunk: list[tuple[_Pending, bytes]], result: CarryResult) -> None:
        batch = self.commitlog.begin()
        placed: list[int] = []
        try:
            for pending, raw in chunk:
                position = batch.place(pending.size)
                batch.add(relocated_header(raw, position), raw[HEADER_SIZE:])
                placed.append(position)
            batch.commit()
        except BaseException:
            batch.abort()
            raise
        self.commitlog.flush()  # the copies are durable before any entry names them
        runs: list[tuple[ConsumeQueue, int, list[bytes]]] = []
        """Entries pointed at the copies, as runs of consecutive queue offsets of a queue."""
        hashes: list[int] = []
        offsets: list[int] = []
        for (pending, raw), position in zip(chunk, placed, strict=True):
            packed = ENTRY.pack(position, pending.size, pending.deliver_ts)
            last = runs[-1] if runs else None
            if (last is not None and last[0] is pending.cq
                    and last[1] + len(last[2]) == pending.queue_offset):
                last[2].append(packed)
            else:
                runs.append((pending.cq, pending.queue_offset, [packed]))
            for key in record_keys(decode_record(raw, 0)[0].properties):
                hashes.append(key_hash(key))
                offsets.append(position)
            result.carried += 1
            result.carried_bytes += pending.size
        # no marks: a carried record keeps its entry's place and state, and a parked timer's
        # pair (timer-log offset, deliver time) in the timer index is unchanged
        self.dispatcher.dispatch([(cq, first, b"".join(packed)) for cq, first, packed in runs],
                                 hashes, offsets, ())


_HOUR_MS = 3_600_000


class Retention:
    """SPEC P4: the deletion of expired segments, pending schedule records carried first."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, carry: CarryForward,
                 writer_lock: threading.Lock, retention_hours: float,
                 counters: Counter[str]) -> None:
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._carry = carry
        self._lock = writer_lock
        self._retention_ms = int(retention_hours * _HOUR_MS)
        self._counters = counters
        self._graveyard: list[Segment] = []
        """Files deleted by the last run: closed by the next one (readers may hold them)."""

    def delete_expired(self, now_ms: int) -> int:
        """Delete whole segments older than retention (never the active one); undelivered
        scheduled messages in them are carried forward first. Returns how many segments were
        deleted. The caller holds the flush lock (and flushes after a deletion)."""
        cutoff = now_ms - self._retention_ms
        cl = self._commitlog
        counters = self._counters
        with self._lock:
            old, self._graveyard = self._graveyard, []
            for segment in old:
                segment.close()
            count = 0
            for segment in cl.segments[:-1]:
                if segment.mtime_ms() >= cutoff:
                    break
                count += 1
            removed = []
            if count:
                carried = self._carry.carry(cl.segments[count].start)
                counters["schedule_carried_total"] += carried.carried
                counters["schedule_carried_bytes_total"] += carried.carried_bytes
                counters["schedule_carry_unreadable_total"] += carried.unreadable
                removed = cl.remove_head(count)
            if removed:
                self._graveyard += removed
                self._graveyard += self._dispatcher.drop_below(cl.min_offset)
                counters["segments_deleted_total"] += len(removed)
                logger.info("expired segments deleted count=%d first=%d new_min_offset=%d",
                            len(removed), removed[0].start, cl.min_offset)
        return len(removed)

    def close(self) -> None:
        """Close the files deleted last (the writer lock held)."""
        for segment in self._graveyard:
            segment.close()
        self._graveyard = []
