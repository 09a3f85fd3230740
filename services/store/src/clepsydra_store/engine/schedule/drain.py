"""The drain of due schedule entries (SPEC D4, D7, O1): the hand-over copies of entries a
hand-over takes (``handover.py``), each made from the stored record's bytes where it is plain
(the codec's D4 splice over the block, its template kept per shape by ``splice_shapes.py``;
records lying close together read with one pread into one buffer), else rebuilt from the
record read as a dict through the same edit, or parked in %SCHEDULE_ERROR% (D7). Each copy
carries ``SCHEDULE_OFFSET`` (its mark), so its dispatch raises the level's handed-over mark
(D9). The caller holds the writer lock and appends the copies."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from zlib import crc32

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import MessageNotFound, StoreError
from clepsydra_core.records import (
    HEADER_SIZE,
    I32,
    MAGIC_V1,
    RECORD_HEADER,
    tags_code,
)
from clepsydra_store.engine.index.key_index import key_hash, record_keys
from clepsydra_store.engine.index.marks import Mark, schedule_offset
from clepsydra_store.engine.log.commitlog import SPAN_MAX, CommitLog
from clepsydra_store.engine.log.segment import Segment
from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.schedule.splice_shapes import SpliceShapes
from clepsydra_store.engine.write.codec import (
    TOPIC_FIELDS,
    Prepared,
    handed_over_fields,
    prepare,
    topic_field_of,
)
from clepsydra_store.engine.write.routing import keep_uniq_key

logger = logging.getLogger(__name__)

Due = tuple[int, int, int, int]
"""A due entry: (queue offset, CommitLog offset, size, deliver ts)."""



_PARKING_TOPICS = frozenset({naming.SCHEDULE_TOPIC.encode(), naming.TIMER_TOPIC.encode()})
"""Topics a spliced record is stored under (valid UTF-8: no decode to check)."""


Spliced = tuple[Prepared, str | None]
"""A copy the splice made and its producer's ``traceparent`` (O1)."""


_Read = tuple[str | None, int, bytes, int, tuple[int, ...]]
"""``Drain._read``: (real topic or None, queue id, its topic field, tags code, KEYS
hashes)."""


@dataclass(slots=True)
class _Memo:
    """What one hand-over batch looked up once (``Drain._splice``): the writer lock is
    held, so the topic table does not change."""

    destinations: dict[tuple[str | None, str | None], tuple[str, int, str | None]] = field(
        default_factory=dict)
    read: dict[int, tuple[dict[str, str], str | None, int, bytes, int, tuple[int, ...]]] = \
        field(default_factory=dict)
    """id of a values dict (``SpliceShapes.fields``: one per shape) -> (that dict, its
    :data:`_Read`): the blocks of one shape share their values but ``UNIQ_KEY`` and
    ``TRACEPARENT``."""


class Drain:
    """Makes the hand-over copies of due entries; the caller appends them under the same
    lock."""

    def __init__(self, commitlog: CommitLog, topics: TopicRegistry,
                 segment_size_bytes: int) -> None:
        self.commitlog = commitlog
        self.topics = topics
        self.segment_size_bytes = segment_size_bytes
        self._shapes = SpliceShapes()
        """codec.splice_template of the stored blocks, parsed once per shape."""
        self._buffer = bytearray()
        """The stored records of a hand-over's run of entries (:meth:`_spans`); emptied by a
        hand-over that finds nothing due."""

    def prepare(self, level: int, due: list[Due], items: list[Prepared],
                delivered: list[bool], traceparents: list[str | None]) -> None:
        """The hand-over copies of ``due`` entries ``(queue offset, CommitLog offset, size,
        deliver ts)`` of ``level`` (0: the timer log), in their order: each spliced from its
        stored bytes (records lying close together read with one pread, :meth:`_spans`), or
        rebuilt by :meth:`_rebuild` (D4) or parked (D7) when it is not plain; with whether it
        was delivered and its producer's ``traceparent`` (O1)."""
        if not due:  # caught up: the buffer of the runs goes back (memory at rest)
            self._buffer = bytearray()
            return
        for (queue_offset, commitlog_offset, size, deliver_ts), fast in self._spliced(level, due):
            if fast is None:
                item, ok, traceparent = self._rebuild(level, queue_offset, commitlog_offset,
                                                      size, deliver_ts)
            else:
                item, traceparent = fast
                ok = True
            items.append(item)
            delivered.append(ok)
            traceparents.append(traceparent)

    def splice_ahead(self, level: int, due: list[Due]) -> list[Spliced | None]:
        """The copies of ``due`` entries that the splice makes (None where it does not: the
        hand-over then makes that one, D4 or D7), for copies made before their entries are due
        (DEC-timer-staging). Nothing is parked nor logged here; a %RETRY% or %DLQ% topic named
        by a copy is created as the hand-over would create it."""
        return [fast for _, fast in self._spliced(level, due)]

    def _spliced(self, level: int, due: list[Due]) -> Iterator[tuple[Due, Spliced | None]]:
        """Each of ``due`` (in order) with its spliced copy and ``traceparent``, or None."""
        memo = _Memo()
        for span, base, run in self._spans(due):
            buf = span if span.__class__ is bytes else memoryview(span)
            for entry in run:
                queue_offset, commitlog_offset, size, deliver_ts = entry
                yield entry, (self._splice(level, queue_offset, buf, commitlog_offset - base,
                                           size, commitlog_offset, deliver_ts, memo)
                              if buf else None)

    def _spans(self, due: list[Due]) -> Iterator[tuple[bytes | bytearray, int, list[Due]]]:
        """``due`` cut into runs of records lying close together in one segment, each with the
        bytes from its first record's offset (one read; b"" when unreadable) and that offset.
        A run's bytes are read into the hand-over's one buffer (:attr:`_buffer`, valid until
        the next run is read; past the run's bytes it holds older ones): a new buffer of up to
        ``SPAN_MAX`` bytes a run made the allocator take memory from the kernel and give it
        back each time, ~0.8 page faults a message (DEC-drain-splice-shapes)."""
        for segment, first, end, i, j in self.commitlog.runs(due, 1):
            buf: bytes | bytearray = b""
            if segment is not None:
                try:
                    buf = self._read_span(segment, first - segment.start, end - first)
                except StoreError:
                    buf = b""
            yield buf, first, due[i:j]

    def _read_span(self, segment: Segment, file_pos: int, size: int) -> bytes | bytearray:
        """``size`` bytes of ``segment`` from ``file_pos``: in :attr:`_buffer` (grown to at
        most ``SPAN_MAX``), or a new bytes object when larger or short."""
        if size > SPAN_MAX:
            return segment.read(file_pos, size)
        if len(self._buffer) < size:
            self._buffer = bytearray(max(size, min(2 * len(self._buffer), SPAN_MAX)))
        if segment.read_into(self._buffer, file_pos, size):
            return self._buffer
        return segment.read(file_pos, size)

    def _splice(self, level: int, queue_offset: int, buf: bytes | memoryview, pos: int, size: int,
                commitlog_offset: int, deliver_ts: int, memo: _Memo | None = None
                ) -> tuple[Prepared, str | None] | None:
        """The D4 rebuild of the record at ``buf[pos:]`` for its real topic made from its
        stored bytes: body and CRC kept, properties re-spliced by the codec's D4 edit
        (``codec.splice_properties`` through ``SpliceShapes.fields``).
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
        prepared = prepare(body, topic, queue_id, topic_field, fields, code, 0, crc, flag,
                           sys_flag, born_ts, born_host, reconsume, (*key_hashes, key_hash(uniq)),
                           (level, queue_offset), deliver_ts, uniq, self.segment_size_bytes)
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
        """D4 for the real topic of a record read as a dict (the codec's edit of its block,
        ``codec.handed_over_fields``), or a D7 park in %SCHEDULE_ERROR%; with the producer's
        ``traceparent`` of a delivered message (O1)."""
        mark = (level, queue_offset)
        try:
            record = self.commitlog.read_record(commitlog_offset, size)
        except MessageNotFound as exc:
            props = {P.SCHEDULE_ERROR: f"unreadable: {exc}",
                     P.SCHEDULE_OFFSET: schedule_offset(level, queue_offset)}
            self._parking(mark, commitlog_offset, props[P.SCHEDULE_ERROR])
            return (Prepared.build(naming.SCHEDULE_ERROR_TOPIC, 0, b"", props, flag=0,
                                   sys_flag=0, born_timestamp=0, born_host=b"\0" * 8,
                                   reconsume_times=0, mark=mark, deliver_ts=deliver_ts,
                                   max_size=self.segment_size_bytes), False, None)
        # parked before unique ids: the msgId its producer got
        props = keep_uniq_key(dict(record.properties), record.offset_msg_id)
        topic, queue_id, reason = self._destination(props.get(P.REAL_TOPIC),
                                                    props.get(P.REAL_QID))
        fields = handed_over_fields(props, level, queue_offset, deliver_ts, reason)
        if reason is not None:
            self._parking(mark, commitlog_offset, reason)
            topic, queue_id = naming.SCHEDULE_ERROR_TOPIC, 0
        body = record.body
        prepared = prepare(body, topic, queue_id, TOPIC_FIELDS.get(topic) or topic_field_of(topic),
                           fields, tags_code(props.get(P.TAGS)), 0, crc32(body), record.flag,
                           record.sys_flag, record.born_timestamp, record.born_host,
                           record.reconsume_times, tuple(map(key_hash, record_keys(props))),
                           mark, deliver_ts, props[P.UNIQ_KEY], self.segment_size_bytes)
        if reason is not None:
            return prepared, False, None
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

    def _parking(self, mark: Mark, commitlog_offset: int, reason: str) -> None:
        """D7: %SCHEDULE_ERROR% exists (one queue) to take the entry's copy."""
        if self.topics.get(naming.SCHEDULE_ERROR_TOPIC) is None:
            self.topics.create(naming.SCHEDULE_ERROR_TOPIC, 1, True)
        logger.warning("scheduled message parked level=%d queue_offset=%d commitlog_offset=%d "
                       "reason=%s", mark[0], mark[1], commitlog_offset, reason)
