"""A ConsumeQueue: the 20-byte entries of one (topic, queueId), entry n at byte 20·n, in files
of ``cq_entries_per_file`` entries under data_dir/consumequeue/<topic>/<queueId>/, each named
by its 20-digit start byte offset.

``next_offset`` is the writer's reservation counter (moved under the writer lock while a batch
is placed); ``max_offset`` is published only once the entries are written, so readers never see
an entry that is not there yet.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from clepsydra_core.records import QueueEntry
from clepsydra_store.engine.log.segment import Segment
from clepsydra_store.engine.log.segment_queue import SegmentQueue

logger = logging.getLogger(__name__)

ENTRY = QueueEntry.LAYOUT
ENTRY_SIZE = QueueEntry.SIZE


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int,
                 entries_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self.files = SegmentQueue(directory, self.file_bytes, aligned=True)
        """The entry files, oldest first (copy-on-write: readers take one snapshot)."""
        self._dirty: set[Segment] = set()
        self.min_offset = self._files[0].start // ENTRY_SIZE if self._files else 0
        self.max_offset = self._load_max()
        self.next_offset = self.max_offset

    @property
    def _files(self) -> list[Segment]:
        return self.files.segments

    def _load_max(self) -> int:
        """Entries from the last file; a torn (partial) entry and trailing empty entries are
        cut (P3)."""
        while self._files:
            last = self._files[-1]
            whole = last.written - last.written % ENTRY_SIZE
            if whole == 0 and len(self._files) > 1:
                self._remove_last()
                continue
            pos = whole
            while pos > 0:
                _, size, _ = ENTRY.unpack(last.read(pos - ENTRY_SIZE, ENTRY_SIZE))
                if size > 0:
                    break
                pos -= ENTRY_SIZE
            if pos != last.written:
                logger.warning("consume queue tail cut topic=%s queue_id=%d file=%s "
                               "from=%d to=%d", self.topic, self.queue_id, last.path,
                               last.written, pos)
                last.truncate(pos)
            return (last.start + pos) // ENTRY_SIZE
        return 0

    def _remove_last(self) -> None:
        self.files.drop_from(len(self.files) - 1)

    def _file_for(self, byte_offset: int, *, create: bool) -> Segment | None:
        starts, files = self.files.view  # (SegmentQueue.find, inline: once per read and write)
        i = bisect.bisect_right(starts, byte_offset) - 1
        if i >= 0 and byte_offset < files[i].end:
            return files[i]
        if not create:
            return None
        return self.files.create(byte_offset - byte_offset % self.file_bytes)

    # ---- write (caller holds the writer lock) -------------------------------------------
    def write(self, queue_offset: int, packed: bytes) -> None:
        """Write packed entries starting at entry ``queue_offset`` (idempotent: a re-dispatch
        writes the same bytes at the same place), then publish the new max."""
        byte_offset = queue_offset * ENTRY_SIZE
        view = memoryview(packed)
        while view:
            segment = self._file_for(byte_offset, create=True)
            assert segment is not None
            file_pos = byte_offset - segment.start
            chunk = view[:segment.capacity - file_pos]
            segment.pwrite(bytes(chunk), file_pos)
            self._dirty.add(segment)
            byte_offset += len(chunk)
            view = view[len(chunk):]
        end = byte_offset // ENTRY_SIZE
        if end > self.max_offset:
            self.max_offset = end
        if end > self.next_offset:
            self.next_offset = end

    # ---- read -----------------------------------------------------------------------------
    def read_raw(self, queue_offset: int, count: int) -> bytes:
        """Packed entries ``[queue_offset, queue_offset + count)``, cut at max and at a missing
        file."""
        count = min(count, self.max_offset - queue_offset)
        out: list[bytes] = []
        byte_offset = queue_offset * ENTRY_SIZE
        want = count * ENTRY_SIZE
        while want > 0:
            segment = self._file_for(byte_offset, create=False)
            if segment is None:
                break
            file_pos = byte_offset - segment.start
            raw = segment.read(file_pos, min(want, segment.capacity - file_pos))
            if not raw:
                break
            out.append(raw)
            byte_offset += len(raw)
            want -= len(raw)
        data = b"".join(out)
        return data[:len(data) - len(data) % ENTRY_SIZE]

    def entry(self, queue_offset: int) -> QueueEntry | None:
        raw = self.read_raw(queue_offset, 1)
        return QueueEntry.decode(raw) if raw else None

    # ---- recovery and retention ------------------------------------------------------------
    def truncate_from(self, commitlog_end: int) -> None:
        """Cut entries that point at or past the recovered CommitLog end (P3)."""
        new_max = self.max_offset
        while new_max > self.min_offset:
            entry = self.entry(new_max - 1)
            if entry is not None and entry.size > 0 and entry.commitlog_offset < commitlog_end:
                break
            new_max -= 1
        if new_max == self.max_offset:
            return
        logger.warning("consume queue entries beyond commitlog end cut topic=%s queue_id=%d "
                       "max_offset=%d new_max_offset=%d commitlog_end=%d", self.topic,
                       self.queue_id, self.max_offset, new_max, commitlog_end)
        byte_offset = new_max * ENTRY_SIZE
        while self._files and self._files[-1].start > byte_offset:
            self._remove_last()
        if self._files:
            last = self._files[-1]
            if last.written > byte_offset - last.start:
                last.truncate(byte_offset - last.start)
        self.max_offset = self.next_offset = new_max
        self.min_offset = min(self.min_offset, new_max)

    def reset_min(self) -> None:
        """Start min_offset again from the first file (recovery; :meth:`drop_below` then
        skips holes and entries below the CommitLog)."""
        self.min_offset = self._files[0].start // ENTRY_SIZE if self._files else self.max_offset

    def drop_below(self, commitlog_min: int, *, any_order: bool = False) -> list[Segment]:
        """Raise min_offset past entries below ``commitlog_min`` (or empty holes) and remove
        the files wholly below it (not the last). Returns removed files for a later close.
        ``any_order``: the entries' CommitLog offsets do not grow with the queue offset (the
        timer log, whose carried entries point ahead), so every entry of a file is looked at,
        not only its last."""
        files = self._files
        count = 0
        while count < len(files) - 1:
            first = files[count]
            if any_order:
                raw = first.read(0, first.capacity)
                top = max((o for o, _, _ in ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 20])),
                          default=None)
                if top is None or top >= commitlog_min:
                    break
            else:
                last_entry = self.entry(first.end // ENTRY_SIZE - 1)
                if last_entry is None or last_entry.commitlog_offset >= commitlog_min:
                    break
            count += 1
        removed = self.files.remove_head(count)
        for segment in removed:
            logger.info("consume queue file deleted topic=%s queue_id=%d path=%s",
                        self.topic, self.queue_id, segment.path)
        low = max(self.min_offset, self._files[0].start // ENTRY_SIZE if self._files else 0)
        while low < self.max_offset:
            raw = self.read_raw(low, 4096)
            if not raw:  # a missing file: go to the next one
                i = bisect.bisect_right(self.files.starts, low * ENTRY_SIZE)
                starts = self.files.starts
                low = (starts[i] // ENTRY_SIZE if i < len(starts)
                       else self.max_offset)
                continue
            for pos in range(0, len(raw), ENTRY_SIZE):
                commitlog_offset, size, _ = ENTRY.unpack_from(raw, pos)
                if size > 0 and commitlog_offset >= commitlog_min:
                    break
                low += 1
            else:
                continue
            break
        self.min_offset = low
        return removed

    def fsync(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for segment in dirty:
            if not segment.closed:
                segment.fsync()

    def close(self) -> None:
        self.files.close()
