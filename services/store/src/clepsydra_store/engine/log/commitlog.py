"""The CommitLog: one append-only log of every record, in segments of ``segment_size_bytes``
named by their 20-digit start offset (naming.segment_file_name) under data_dir/commitlog.

A record that does not fit the rest of a segment (keeping room for the 8-byte marker) is
preceded by an end-of-segment marker filling that rest, and goes to the next segment. Writers
place records with an :class:`AppendBatch` (one write per batch per segment); the owner
(MessageStore) serialises batches with its writer lock. Reads are lock-free ``pread`` calls on a
copy-on-write snapshot of the segment list.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from clepsydra_core.errors import CorruptRecordError, MessageNotFound, StoreError
from clepsydra_core.records import (
    END_MAGIC,
    MAGIC_V1,
    MIN_END_MARKER,
    CommitLogRecord,
    decode_record,
    encode_end_marker,
    peek_size_magic,
)
from clepsydra_store.engine.log.segment import Segment
from clepsydra_store.engine.log.segment_queue import SegmentQueue
from clepsydra_store.engine.types import RECORDS, Item, RecordReader

logger = logging.getLogger(__name__)

RecordVisitor = Callable[[CommitLogRecord, int], None]
"""Called with each valid record and its total size during a scan."""

_FIRST_READ = 4096

SPAN_GAP = 64 * 1024
SPAN_MAX = 8 * 1024 * 1024
"""Records lying close together in one segment are read with one pread (:meth:`CommitLog.runs`:
the drain of due entries, DEC-drain-splice-shapes, and a pull's page, DEC-pull-page-spans): gaps
of at most SPAN_GAP bytes, spans of at most SPAN_MAX bytes."""

Run = tuple[Segment | None, int, int, int, int]
"""(segment, first byte, end byte, i, j): ``places[i:j]`` lie in ``[first, end)`` of the
segment; segment None (and ``j == i + 1``) for a place no run can hold (no segment holds it,
a size of 0 or less, past what is written)."""


class CommitLog:
    def __init__(self, directory: Path, segment_size_bytes: int) -> None:
        self.directory = directory
        self.segment_size_bytes = segment_size_bytes
        self.files = SegmentQueue(directory, segment_size_bytes)
        """The segments, oldest first (copy-on-write: readers take one snapshot)."""
        if not len(self.files):
            self._roll(0)
        self.flushed_offset = self.max_offset
        self._flush_lock = threading.Lock()

    @property
    def segments(self) -> list[Segment]:
        return self.files.segments

    @property
    def active(self) -> Segment:
        return self.files.view[1][-1]  # (the view itself: one call fewer a produce)

    @property
    def min_offset(self) -> int:
        return self.files.segments[0].start

    @property
    def max_offset(self) -> int:
        """One past the last byte written (the next record's commitlog offset, or the start of
        a segment)."""
        return self.files.segments[-1].write_offset

    def _roll(self, start: int) -> Segment:
        segment = self.files.create(start)
        logger.info("commitlog segment created start_offset=%d path=%s", start, segment.path)
        return segment

    def segment_for(self, commitlog_offset: int) -> Segment | None:
        return self.files.find(commitlog_offset)

    # ---- append ------------------------------------------------------------------------
    def begin(self) -> AppendBatch:
        """Start placing records at the end of the log (caller holds the writer lock)."""
        return AppendBatch(self)

    # ---- read --------------------------------------------------------------------------
    def runs(self, places: Sequence[Sequence[Any]], at: int = 0) -> Iterator[Run]:
        """``places`` (each holding a record's CommitLog offset at index ``at`` and its size at
        ``at + 1``, in increasing offsets for the runs to be long) cut into runs of records
        lying close together in one segment (:data:`SPAN_GAP`, :data:`SPAN_MAX`): each run is
        read with one pread by its caller instead of one a record."""
        segment_for = self.files.find
        i, n = 0, len(places)
        size_at = at + 1
        while i < n:
            first, size = places[i][at], places[i][size_at]
            segment = segment_for(first)
            limit = min(segment.end, segment.write_offset) if segment is not None else 0
            end = first + size
            if segment is None or first < 0 or size <= 0 or end > limit:
                yield None, first, first, i, i + 1
                i += 1
                continue
            j = i + 1
            while j < n:
                offset, size = places[j][at], places[j][size_at]
                if (offset < end or offset - end > SPAN_GAP or offset + size > limit
                        or offset + size - first > SPAN_MAX or size <= 0):
                    break
                end = offset + size
                j += 1
            yield segment, first, end, i, j
            i = j

    @overload
    def read_records(self, places: Sequence[Sequence[Any]], at: int = 0
                     ) -> list[CommitLogRecord | None]: ...

    @overload
    def read_records(self, places: Sequence[Sequence[Any]], at: int,
                     reader: RecordReader[Item]) -> list[Item | None]: ...

    def read_records(self, places: Sequence[Sequence[Any]], at: int = 0,
                     reader: RecordReader[Any] = RECORDS) -> list[Any]:
        """The records at ``places`` (CommitLog offset at index ``at``, size at ``at + 1``), in
        their order, None where none is (its segment deleted, a torn or other record there): as
        :meth:`read_record` for each, with one pread a run of records lying close together
        (:meth:`runs`) instead of one a record (DEC-pull-page-spans); each decoded by
        ``reader`` (the records themselves, or a pull's JSON views: DEC-pull-json-view)."""
        out: list[Any] = []
        append = out.append
        decode, offset_of = reader.decode, reader.offset
        for segment, first, end, i, j in self.runs(places, at):
            raw = b""
            if segment is not None:
                try:
                    raw = segment.read(first - segment.start, end - first)
                except StoreError:
                    raw = b""
            if len(raw) != end - first:
                for k in range(i, j):
                    append(self._record_or_none(places[k][at], places[k][at + 1], reader))
                continue
            for k in range(i, j):
                offset = places[k][at]
                item: Any
                try:
                    item, _ = decode(raw, offset - first)
                except CorruptRecordError:
                    item = None
                if item is None or offset_of(item) != offset:
                    item = self._record_or_none(offset, places[k][at + 1], reader)
                append(item)
        return out

    def _record_or_none(self, commitlog_offset: int, size: int,
                        reader: RecordReader[Item]) -> Item | None:
        try:
            return reader.of(self.read_record(commitlog_offset, size))
        except MessageNotFound:
            return None

    def read_bytes(self, commitlog_offset: int, size: int) -> bytes:
        """Exactly ``size`` bytes at ``commitlog_offset``; MessageNotFound when not there."""
        segment = self.segment_for(commitlog_offset)
        if segment is None or commitlog_offset + size > segment.write_offset:
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}")
        try:
            raw = segment.read(commitlog_offset - segment.start, size)
        except StoreError as exc:  # segment deleted under us
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}") from exc
        if len(raw) != size:
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}")
        return raw

    def read_record(self, commitlog_offset: int, size: int | None = None) -> CommitLogRecord:
        """The record that starts at ``commitlog_offset``; MessageNotFound if none does."""
        segment = self.segment_for(commitlog_offset)
        if segment is None or commitlog_offset >= segment.write_offset or commitlog_offset < 0:
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}")
        file_pos = commitlog_offset - segment.start
        try:
            raw = segment.read(file_pos, size or _FIRST_READ)
            total, magic = peek_size_magic(raw, 0)
            if magic != MAGIC_V1 or total <= 0:
                raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}")
            if total > len(raw):
                raw += segment.read(file_pos + len(raw), total - len(raw))
            record, _ = decode_record(raw, 0)
        except (StoreError, CorruptRecordError) as exc:
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}: "
                                  f"{exc}") from exc
        if record.commitlog_offset != commitlog_offset:
            raise MessageNotFound(f"no message at commitlog offset {commitlog_offset}")
        return record

    # ---- durability --------------------------------------------------------------------
    def flush(self) -> int:
        """fsync every segment holding unflushed bytes; returns the new flushed offset."""
        with self._flush_lock:
            target = self.max_offset
            flushed = self.flushed_offset
            if target > flushed:
                for segment in self.segments:
                    if segment.end > flushed and segment.start < target and not segment.closed:
                        segment.fsync()
                self.flushed_offset = target
            return self.flushed_offset

    # ---- recovery (SPEC P3) ------------------------------------------------------------
    def recover(self, check_from: int, dispatch_from: int, visit: RecordVisitor, *,
                trusted_to: int | None = None) -> int:
        """Validate records from the start of the segment holding ``check_from``, calling
        ``visit`` for each valid record at or after ``dispatch_from``; truncate a torn tail
        and drop any later segment. Returns the recovered end (max offset).

        ``trusted_to``: a record boundary up to which the log is known fsync'd (a trusted
        checkpoint's offset): the walk starts there instead of at its segment's start, unless
        the segment is shorter (a machine crash lost bytes counted as flushed: then the whole
        segment is walked, as without it). DEC-recovery-from-checkpoint: the walk of the
        segment before the checkpoint (up to a GiB of records decoded) was most of a restart."""
        segments = self.segments
        first = self.segment_for(check_from)
        index = segments.index(first) if first is not None else 0
        end = segments[index].start
        first_pos = 0
        head = segments[index]
        if trusted_to is not None and head.start <= trusted_to <= head.start + head.written:
            first_pos = trusted_to - head.start
        for i in range(index, len(segments)):
            segment = segments[i]
            if segment.start != end:
                logger.warning("commitlog gap before segment start_offset=%d expected=%d",
                               segment.start, end)
                self._drop_from(i)
                break
            file_end, full = self._walk(segment, dispatch_from, visit,
                                        first_pos if i == index else 0)
            end = segment.start + file_end
            if not full:
                if file_end < segment.written:
                    logger.warning("commitlog torn tail truncated segment=%d from=%d to=%d",
                                   segment.start, segment.written, file_end)
                    segment.truncate(file_end)
                self._drop_from(i + 1)
                break
        if self.active.written >= self.active.capacity:
            self._roll(self.active.end)
            end = self.active.start
        self.flushed_offset = end
        return end

    def _drop_from(self, index: int) -> None:
        for segment in self.files.drop_from(index):
            logger.warning("commitlog segment dropped after torn tail start_offset=%d",
                           segment.start)

    def _walk(self, segment: Segment, dispatch_from: int, visit: RecordVisitor,
              pos: int = 0) -> tuple[int, bool]:
        """(end file position of the last valid record or marker, reached the end marker),
        walking from the record at file position ``pos``."""
        size_written = segment.written
        if size_written == 0:
            return 0, False
        with open(segment.path, "rb") as f, mmap.mmap(f.fileno(), 0,
                                                       access=mmap.ACCESS_READ) as mm:
            while pos < size_written:
                total, magic = peek_size_magic(mm, pos)  # type: ignore[arg-type]
                if magic == END_MAGIC:
                    if (total >= MIN_END_MARKER and pos + total == segment.capacity
                            and size_written >= segment.capacity):
                        return segment.capacity, True
                    break
                if magic != MAGIC_V1:
                    break
                try:
                    record, total = decode_record(mm, pos)  # type: ignore[arg-type]
                except CorruptRecordError as exc:
                    logger.warning("commitlog invalid record segment=%d file_pos=%d: %s",
                                   segment.start, pos, exc)
                    break
                if record.commitlog_offset != segment.start + pos:
                    break
                if record.commitlog_offset >= dispatch_from:
                    visit(record, total)
                pos += total
        return pos, False

    def replay(self, from_offset: int, visit: RecordVisitor) -> None:
        """Visit every valid record from ``from_offset`` to the end (after :meth:`recover`)."""
        for segment in self.segments:
            if segment.end > from_offset:
                self._walk(segment, from_offset, visit)

    # ---- retention ---------------------------------------------------------------------
    def remove_head(self, count: int) -> list[Segment]:
        """Drop the ``count`` oldest segments from the list and unlink their files (never the
        active one); the caller closes them later (readers may hold them)."""
        return self.files.remove_head(min(count, len(self.files) - 1))

    def close(self) -> None:
        self.files.close()


class AppendBatch:
    """Places records at the end of the log and writes them with one write per segment.

    Hot loops may append to ``parts`` and advance ``position`` themselves while a record fits
    (``position + size + MIN_END_MARKER <= segment_end``), calling :meth:`place` otherwise."""

    __slots__ = ("_log", "_segment", "parts", "position", "segment_end", "start")

    def __init__(self, log: CommitLog) -> None:
        self._log = log
        self._segment = log.active
        self.segment_end = self._segment.end
        self.start = self.position = self._segment.write_offset
        self.parts: list[bytes] = []

    def place(self, size: int) -> int:
        """The commitlog offset the next record of ``size`` bytes goes to (rolling to a new
        segment behind an end marker when it does not fit)."""
        remaining = self._segment.end - self.position
        if size + MIN_END_MARKER > remaining:
            if size + MIN_END_MARKER > self._log.segment_size_bytes:
                raise StoreError(f"record of {size} bytes is larger than a segment")
            self.parts.append(encode_end_marker(remaining))
            self.position += remaining
            self._write()
            self._segment = self._log._roll(self.position)
            self.segment_end = self._segment.end
        return self.position

    def add(self, header: bytes, tail: bytes) -> None:
        self.parts.append(header)
        self.parts.append(tail)
        self.position += len(header) + len(tail)

    def _write(self) -> None:
        if self.parts:
            data = b"".join(self.parts)
            self.parts.clear()
            self._segment.append(data)

    def commit(self) -> int:
        """Write what is placed; returns the new end offset."""
        self._write()
        return self.position

    def abort(self) -> None:
        """Undo a failed batch: cut the log back to where it started."""
        self.parts.clear()
        log = self._log
        log.files.drop_from(bisect.bisect_right(log.files.starts, self.start))
        active = log.active
        if active.written > self.start - active.start:
            active.truncate(self.start - active.start)
