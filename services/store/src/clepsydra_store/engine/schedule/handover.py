"""Scheduler hand-over (SPEC D3-D9): under the writer lock, read a level's due schedule entries
and rebuild each for its real topic (or park it in %SCHEDULE_ERROR%), as records carrying
``SCHEDULE_OFFSET`` so their dispatch raises the level's handed-over mark."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from zlib import crc32

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import MessageNotFound, StoreError, ValidationError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import (
    HEADER_SIZE,
    I32,
    MAGIC_V1,
    MIN_END_MARKER,
    RECORD_HEADER,
    CommitLogRecord,
    tags_code,
)
from clepsydra_core.schedule_rules import corrected_deliver_ts, first_pending, resume_offset
from clepsydra_store.engine.index.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.entry_states import CANCELLED
from clepsydra_store.engine.index.key_index import key_hash
from clepsydra_store.engine.log.commitlog import CommitLog
from clepsydra_store.engine.log.segment import Segment
from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.schedule.splice_shapes import SpliceShapes
from clepsydra_store.engine.write.codec import (
    TOPIC_FIELDS,
    Prepared,
    encode_tail,
    handover_properties,
    schedule_offset,
    too_large,
    topic_field_of,
)

logger = logging.getLogger(__name__)

LOCK_CHUNK = 2_000
"""Most entries one hold of the writer lock hands over: a larger hand-over request (up to the
wire's 10,000) is done a chunk at a time, and between chunks the lock is given up and the
thread yields, so producers and other levels wait for one chunk at most (issue 14: bigger
requests, fewer scheduler round trips, the same lock holds)."""

_SPAN_GAP = 64 * 1024
_SPAN_MAX = 8 * 1024 * 1024
"""Schedule entries whose records lie close together in one segment are read with one pread:
gaps of at most _SPAN_GAP bytes, spans of at most _SPAN_MAX bytes."""


@dataclass(slots=True)
class HandoverPlan:
    start: int
    next_offset: int
    items: list[Prepared] = field(default_factory=list)
    delivered: list[bool] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    """The producer's ``traceparent`` of each item (None if absent or parked), for O1."""
    skipped: int = 0
    cancelled: list[int] = field(default_factory=list)
    """Queue offsets of cancelled entries passed over (issue 15): never handed over; the
    level's mark is raised past them once the batch is appended."""
    not_due: bool = False
    next_deliver_ts: int | None = None


_PARKING_TOPICS = frozenset({naming.SCHEDULE_TOPIC.encode(), naming.TIMER_TOPIC.encode()})
"""Topics a spliced record is stored under (valid UTF-8: no decode to check)."""


_Read = tuple[str | None, int, bytes, int, tuple[int, ...]]
"""``Handover._read``: (real topic or None, queue id, its topic field, tags code, KEYS
hashes)."""


@dataclass(slots=True)
class _Memo:
    """What one hand-over batch looked up once (``Handover._splice``): the writer lock is
    held, so the topic table does not change."""

    destinations: dict[tuple[str | None, str | None], tuple[str, int, str | None]] = field(
        default_factory=dict)
    read: dict[int, tuple[dict[str, str], str | None, int, bytes, int, tuple[int, ...]]] = \
        field(default_factory=dict)
    """id of a values dict (``SpliceShapes.fields``: one per shape) -> (that dict, its
    :data:`_Read`): the blocks of one shape share their values but ``UNIQ_KEY`` and
    ``TRACEPARENT``."""


class Handover:
    """Plans a hand-over batch; the caller appends ``plan.items`` under the same lock."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, topics: TopicRegistry,
                 levels: DelayLevels, segment_size_bytes: int) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.topics = topics
        self.levels = levels
        self.segment_size_bytes = segment_size_bytes
        self._shapes = SpliceShapes()
        """codec.splice_template of the stored blocks, parsed once per shape."""
        self._buffer = bytearray()
        """The stored records of a hand-over's run of entries (:meth:`_spans`); emptied by a
        hand-over that finds nothing due."""

    def check_level(self, level: int) -> None:
        if not 1 <= level <= self.levels.max_level:
            raise ValidationError(f"delay level {level} is not in 1..{self.levels.max_level}",
                                  rule="L1", code="INVALID_DELAY_LEVEL")

    def queue(self, level: int) -> ConsumeQueue:
        self.check_level(level)
        return self.dispatcher.queue(naming.SCHEDULE_TOPIC, self.levels.queue_id(level))

    def continue_offset(self, level: int, cq: ConsumeQueue, from_offset: int) -> int:
        """Where a hand-over asked to start at ``from_offset`` really starts: one entry after
        the level's handed-over mark, whatever the caller names, so that no entry is ever
        skipped (D9 for a position behind the mark; a position ahead of ``mark + 1`` - a
        hostile call, or a scheduler whose saved progress outran a recovered store - starts
        at ``mark + 1`` too). Never below the queue's minimum (D8: entries dropped by
        retention), never above its maximum."""
        start = resume_offset(self.dispatcher.mark(level), cq.min_offset, cq.max_offset)
        if from_offset > start:
            logger.warning("hand-over asked to start past entries not handed over level=%d "
                           "from_offset=%d handed_over=%d: starting at %d", level, from_offset,
                           self.dispatcher.mark(level), start)
        return start

    def plan(self, level: int, from_offset: int, max_count: int, now_ms: int) -> HandoverPlan:
        """Entries from :meth:`continue_offset` on, up to ``max_count``, while due (D3, D5);
        ``skipped`` counts the positions from ``from_offset`` that were handed over already."""
        cq = self.queue(level)
        start = self.continue_offset(level, cq, from_offset)
        plan = HandoverPlan(start=start, next_offset=start,
                            skipped=max(0, start - max(from_offset, cq.min_offset)))
        delay_ms = self.levels.delay_ms(level)
        states = self.dispatcher.states.of_queue(cq)  # before the entries (entry_states.py)
        raw = cq.read_raw(start, max(0, max_count))
        due: list[tuple[int, int, int, int]] = []
        for i, (commitlog_offset, size, code) in enumerate(ENTRY.iter_unpack(raw)):
            queue_offset = start + i
            if code == CANCELLED or states.get(queue_offset) == CANCELLED:
                plan.next_offset = queue_offset + 1
                plan.cancelled.append(queue_offset)
                continue
            deliver_ts = corrected_deliver_ts(code, now_ms, delay_ms)  # D3
            if deliver_ts > now_ms:  # D5
                plan.not_due = True
                plan.next_deliver_ts = deliver_ts
                break
            plan.next_offset = queue_offset + 1
            due.append((queue_offset, commitlog_offset, size, deliver_ts))
        self.prepare(level, due, plan.items, plan.delivered, plan.traceparents)
        return plan

    def prepare(self, level: int, due: list[tuple[int, int, int, int]], items: list[Prepared],
                delivered: list[bool], traceparents: list[str | None]) -> None:
        """The hand-over copies of ``due`` entries ``(queue offset, CommitLog offset, size,
        deliver ts)`` of ``level`` (0: the timer log), in their order: each spliced from its
        stored bytes (records lying close together read with one pread, :meth:`_spans`), or
        rebuilt by :meth:`_rebuild` (D4) or parked (D7) when it is not plain; with whether it
        was delivered and its producer's ``traceparent`` (O1)."""
        if not due:  # caught up: the buffer of the runs goes back (memory at rest)
            self._buffer = bytearray()
            return
        memo = _Memo()
        for span, base, run in self._spans(due):
            buf = span if span.__class__ is bytes else memoryview(span)
            for queue_offset, commitlog_offset, size, deliver_ts in run:
                fast = self._splice(level, queue_offset, buf, commitlog_offset - base, size,
                                    commitlog_offset, deliver_ts, memo) if buf else None
                if fast is None:
                    item, ok, traceparent = self._rebuild(level, queue_offset, commitlog_offset,
                                                          size, deliver_ts)
                else:
                    item, traceparent = fast
                    ok = True
                items.append(item)
                delivered.append(ok)
                traceparents.append(traceparent)

    def _spans(self, due: list[tuple[int, int, int, int]]
               ) -> Iterator[tuple[bytes | bytearray, int, list[tuple[int, int, int, int]]]]:
        """``due`` cut into runs of records lying close together in one segment, each with the
        bytes from its first record's offset (one read; b"" when unreadable) and that offset.
        A run's bytes are read into the hand-over's one buffer (:attr:`_buffer`, valid until
        the next run is read; past the run's bytes it holds older ones): a new buffer of up to
        ``_SPAN_MAX`` bytes a run made the allocator take memory from the kernel and give it
        back each time, ~0.8 page faults a message (issue 14)."""
        segment_for = self.commitlog.segment_for
        i, n = 0, len(due)
        while i < n:
            first = due[i][1]
            segment = segment_for(first)
            if segment is None or first < 0:
                yield b"", first, due[i:i + 1]
                i += 1
                continue
            limit = min(segment.end, segment.write_offset)
            end = first + max(due[i][2], 0)
            j = i + 1
            while j < n:
                offset, size = due[j][1], due[j][2]
                if (offset < end or offset - end > _SPAN_GAP or offset + size > limit
                        or offset + size - first > _SPAN_MAX or size <= 0):
                    break
                end = offset + size
                j += 1
            buf: bytes | bytearray = b""
            if end <= limit:
                try:
                    buf = self._read_span(segment, first - segment.start, end - first)
                except StoreError:
                    buf = b""
            yield buf, first, due[i:j]
            i = j

    def _read_span(self, segment: Segment, file_pos: int, size: int) -> bytes | bytearray:
        """``size`` bytes of ``segment`` from ``file_pos``: in :attr:`_buffer` (grown to at
        most ``_SPAN_MAX``), or a new bytes object when larger or short."""
        if size > _SPAN_MAX:
            return segment.read(file_pos, size)
        if len(self._buffer) < size:
            self._buffer = bytearray(max(size, min(2 * len(self._buffer), _SPAN_MAX)))
        if segment.read_into(self._buffer, file_pos, size):
            return self._buffer
        return segment.read(file_pos, size)

    def _splice(self, level: int, queue_offset: int, buf: bytes | memoryview, pos: int, size: int,
                commitlog_offset: int, deliver_ts: int, memo: _Memo | None = None
                ) -> tuple[Prepared, str | None] | None:
        """The D4 rebuild of the record at ``buf[pos:]`` for its real topic made from its
        stored bytes: body and CRC kept, properties re-spliced by the codec
        (``codec.splice_properties`` through ``SpliceShapes.fields``, equal to ``_rebuild``'s
        ``codec.handover_properties``).
        None when anything is not plain (a short or invalid record, repeated or undecodable
        properties, a park): the caller then takes ``_rebuild``, which decides what the old
        path decides. ``memo`` keeps, for one hand-over batch, what the blocks of one shape
        share (:meth:`_read`)."""
        if pos + size > len(buf) or size < HEADER_SIZE + 5:
            return None
        (total, magic, crc, _queue_id, flag, _qo, stored_offset, sys_flag, born_ts, born_host,
         _st, _sh, reconsume, body_len) = RECORD_HEADER.unpack_from(buf, pos)
        if magic != MAGIC_V1 or total != size or stored_offset != commitlog_offset:
            return None
        p = pos + HEADER_SIZE
        end = pos + size
        if body_len < 0 or p + body_len + 5 > end:
            return None
        body = buf[p:p + body_len]
        if crc32(body) != crc:
            return None
        p += body_len
        topic_len = buf[p]
        p += 1 + topic_len
        if p + 4 > end:
            return None
        stored_topic = bytes(buf[p - topic_len:p])
        if stored_topic not in _PARKING_TOPICS:
            try:
                stored_topic.decode()
            except UnicodeDecodeError:
                return None
        (props_len,) = I32.unpack_from(buf, p)
        p += 4
        if props_len < 0 or p + props_len != end:
            return None
        block = buf[p:end]
        found = self._shapes.fields(block if isinstance(block, bytes) else bytes(block), level,
                                    queue_offset, deliver_ts)
        if found is None:  # no UNIQ_KEY (parked before unique ids: _rebuild gives it its
            return None    # msgId), or properties the codec cannot splice
        fields, values, uniq, traceparent = found
        if memo is None:
            memo = _Memo()
        read = memo.read.get(id(values))
        if read is None or read[0] is not values:  # (held in the memo: its id is its own)
            read = memo.read[id(values)] = (values, *self._read(values, memo))
        _, topic, queue_id, topic_field, code, key_hashes = read
        if topic is None:
            return None
        tail = encode_tail(body, topic_field, fields)
        new_size = HEADER_SIZE + len(tail)
        if new_size + MIN_END_MARKER > self.segment_size_bytes:
            raise too_large(new_size, self.segment_size_bytes)
        prepared = tuple.__new__(Prepared, (
            new_size, topic, queue_id, code, 0, crc, flag,
            sys_flag, born_ts, born_host, reconsume, body_len, tail,
            (*key_hashes, key_hash(uniq)), (level, queue_offset), deliver_ts, uniq))
        return prepared, traceparent

    def _read(self, values: dict[str, str], memo: _Memo) -> _Read:
        """What a splice takes from the values a block's shape gives (``SpliceShapes.fields``):
        its destination (topic None when it cannot be rebuilt: the rebuild parks it, D7), the
        topic's field, the tags code and the hashes of its KEYS."""
        real = (values.get(P.REAL_TOPIC), values.get(P.REAL_QID))
        destination = memo.destinations.get(real)
        if destination is None:
            destination = memo.destinations[real] = self._destination(*real)
        topic, queue_id, reason = destination
        if reason is not None:
            return None, 0, b"", 0, ()
        keys = values.get(P.KEYS)
        return (topic, queue_id, TOPIC_FIELDS.get(topic) or topic_field_of(topic),
                tags_code(values.get(P.TAGS)),
                tuple(key_hash(k) for k in keys.split()) if keys else ())

    def _rebuild(self, level: int, queue_offset: int, commitlog_offset: int, size: int,
                 deliver_ts: int) -> tuple[Prepared, bool, str | None]:
        """D4 rebuild for the real topic, or a D7 park in %SCHEDULE_ERROR%; with the
        producer's ``traceparent`` of a delivered message (O1)."""
        mark = (level, queue_offset)
        try:
            record = self.commitlog.read_record(commitlog_offset, size)
        except MessageNotFound as exc:
            props = {P.SCHEDULE_ERROR: f"unreadable: {exc}",
                     P.SCHEDULE_OFFSET: schedule_offset(level, queue_offset)}
            return (self._park(CommitLogRecord(topic="", body=b""), props, mark, deliver_ts),
                    False, None)
        props = dict(record.properties)
        if not props.get(P.UNIQ_KEY):  # parked before unique ids: the msgId its producer got
            props[P.UNIQ_KEY] = record.offset_msg_id
        handover_properties(props, level, queue_offset, deliver_ts)
        topic, queue_id, reason = self._destination(props.get(P.REAL_TOPIC),
                                                    props.get(P.REAL_QID))
        if reason is not None:
            props[P.SCHEDULE_ERROR] = reason
            return self._park(record, props, mark, deliver_ts), False, None
        prepared = Prepared.build(topic, queue_id, record.body, props, flag=record.flag,
                              sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
                              born_host=record.born_host,
                              reconsume_times=record.reconsume_times, mark=mark,
                              deliver_ts=deliver_ts, max_size=self.segment_size_bytes)
        return prepared, True, props.get(P.TRACEPARENT)

    def _destination(self, topic: str | None,
                     real_qid: str | None) -> tuple[str, int, str | None]:
        """(real topic, real queue id, None) or ("", 0, why it cannot be rebuilt), from the
        REAL_TOPIC and REAL_QID properties."""
        if not topic:
            return "", 0, "no_real_topic"
        if topic == naming.TRANSACTION_HALF_TOPIC:
            return "", 0, f"transaction_half_topic: {topic}"
        cfg = self.topics.get(topic)
        if cfg is None and (naming.is_retry_topic(topic) or naming.is_dlq_topic(topic)):
            cfg, _ = self.topics.create(topic, 1, True)
            logger.info("topic auto-created for schedule delivery topic=%s queues=1", topic)
        if cfg is None:
            return "", 0, f"real_topic_missing: {topic}"
        try:
            queue_id = int(real_qid if real_qid is not None else "")
        except ValueError:
            return "", 0, f"bad_real_qid: {real_qid!r}"
        if not 0 <= queue_id < cfg.queues:
            return "", 0, f"real_qid_out_of_range: {topic} has {cfg.queues} queues, " \
                          f"REAL_QID={queue_id}"
        return topic, queue_id, None

    def _park(self, record: CommitLogRecord, props: dict[str, str], mark: tuple[int, int],
              deliver_ts: int) -> Prepared:
        if self.topics.get(naming.SCHEDULE_ERROR_TOPIC) is None:
            self.topics.create(naming.SCHEDULE_ERROR_TOPIC, 1, True)
        logger.warning("scheduled message parked level=%d queue_offset=%d commitlog_offset=%d "
                       "reason=%s", mark[0], mark[1], record.commitlog_offset,
                       props.get(P.SCHEDULE_ERROR))
        return Prepared.build(naming.SCHEDULE_ERROR_TOPIC, 0, record.body, props,
                              flag=record.flag, sys_flag=record.sys_flag,
                              born_timestamp=record.born_timestamp, born_host=record.born_host,
                              reconsume_times=record.reconsume_times, mark=mark,
                              deliver_ts=deliver_ts, max_size=self.segment_size_bytes)

    def protect_offset(self) -> tuple[int, int] | None:
        """(smallest CommitLog offset of a schedule entry not yet handed over, its level), for
        retention (P4); None when every level is fully handed over."""
        best: tuple[int, int] | None = None
        for level in self.levels.levels():
            cq = self.dispatcher.existing_queue(naming.SCHEDULE_TOPIC, self.levels.queue_id(level))
            if cq is None:
                continue
            first = first_pending(self.dispatcher.mark(level), cq.min_offset)
            if first >= cq.max_offset:
                continue
            entry = cq.entry(first)
            if entry is not None and (best is None or entry.commitlog_offset < best[0]):
                best = (entry.commitlog_offset, level)
        return best
