"""One file of the on-disk key index (DEC-key-index-on-disk): a header, a table of hash
slots and chained entries, read and written with ``pread``/``pwrite`` through the page cache
(nothing mapped, so the process's memory does not grow with the file).

Layout (big-endian), named by the CommitLog offset of its first entry (20 digits)::

    header   64 bytes   magic "CLKI", version u16, state u16 (0 open, 1 clean), slots u32,
                        capacity u32 (entries), count u32, sequence u32 (one more than the
                        file before: a missing file shows), begin offset i64,
                        end offset i64 (CommitLog offsets of the first and last entry),
                        begin and end timestamps i64 (epoch ms when they were indexed), 8 zero
    entries  20 bytes x count: key hash u64 | CommitLog offset i64 | previous entry number u32
             (1-based: the next older entry of the same slot, 0 none)
    slots    4 bytes x slots, after the last entry, in a clean file only: the newest entry
             number of the keys hashing there, 0 none

Entries are appended in CommitLog order. While a file takes entries its slot table lives in
memory (``heads``, fixed size: ``slots`` x 4 bytes) and is written after the entries when the
file is sealed (full) or closed cleanly (RocketMQ puts the slots before the entries; here they
follow them so that a file is never longer than what it holds: no sparse hole counts against a
disk quota). The header's count is written at each flush after an fsync, so it marks a durable
point. A file found ``open`` at start has its slots rebuilt from its entries up to that count
(see :meth:`IndexFile.rebuild_slots`).
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_store.engine.log.segment import pwrite_all

logger = logging.getLogger(__name__)

MAGIC = b"CLKI"
VERSION = 1
HEADER = struct.Struct(">4sHHIIIIqqqq")
HEADER_SIZE = 64
SLOT = struct.Struct(">I")
ENTRY = struct.Struct(">QqI")
STATE_OPEN = 0
STATE_CLEAN = 1
_SCAN_CHUNK = 65_536
"""Entries read at a time when slots are rebuilt."""


class CorruptIndexFile(Exception):
    """The file cannot be read as an index file (torn header, other magic or version)."""


def slot_of(h: int, slots: int) -> int:
    """The slot of a key hash: its crc32 half (well spread, unlike adler32's low bits)."""
    return (h >> 32) % slots


_SLOT_CHUNK = 16_384
"""Slots converted at a time between memory and the file (no transient copy of a whole
table: freed large blocks would stay in the allocator and show in the process's memory)."""


def _empty_slots(slots: int) -> array[int]:
    return array("I", [0]) * slots


def _slots_to_disk(heads: array[int]) -> Iterator[tuple[int, bytes]]:
    """(byte position in the table, big-endian bytes) chunk by chunk."""
    for start in range(0, len(heads), _SLOT_CHUNK):
        chunk = heads[start:start + _SLOT_CHUNK]
        if sys.byteorder == "little":
            chunk.byteswap()
        yield 4 * start, chunk.tobytes()


class IndexFile:
    __slots__ = ("begin_offset", "begin_ts", "capacity", "count", "end_offset", "end_ts", "fd",
                 "heads", "path", "sequence", "slots", "synced", "torn")

    def __init__(self, path: Path, fd: int, slots: int, capacity: int) -> None:
        self.path = path
        self.fd = fd
        self.slots = slots
        self.capacity = capacity
        self.count = 0
        self.begin_offset = int(path.name)
        self.end_offset = -1
        self.begin_ts = self.end_ts = 0
        self.heads: array[int] | None = None
        """The slot table while this file takes entries; None once its slots are on disk."""
        self.synced: tuple[int, int] = (-1, -1)
        """(count, state) of the header last made durable."""
        self.sequence = 1
        self.torn = False
        """Found shorter than its header's count (cut to the entries present)."""

    # ---- open / create ---------------------------------------------------------------------
    @classmethod
    def create(cls, directory: Path, begin_offset: int, slots: int, capacity: int,
               now_ms: int, sequence: int) -> IndexFile:
        path = directory / naming.segment_file_name(begin_offset)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create key index file {path}: {exc}") from exc
        f = cls(path, fd, slots, capacity)
        f.begin_ts = f.end_ts = now_ms
        f.sequence = sequence
        f.heads = _empty_slots(slots)
        f.write_header(STATE_OPEN)
        return f

    @classmethod
    def open(cls, path: Path) -> tuple[IndexFile, int]:
        """(the file, its header state); CorruptIndexFile when its header cannot be trusted.
        A count past the entries really in the file (a torn file) is cut to them."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, HEADER_SIZE, 0)
            if len(raw) < HEADER_SIZE:
                raise CorruptIndexFile(f"header torn ({len(raw)} bytes)")
            (magic, version, state, slots, capacity, count, sequence, begin, end, begin_ts,
             end_ts) = HEADER.unpack_from(raw)
            if magic != MAGIC:
                raise CorruptIndexFile(f"magic {magic!r}, not {MAGIC!r}")
            if version != VERSION:
                raise CorruptIndexFile(f"format version {version}, this store reads {VERSION}")
            if not (slots and capacity) or count > capacity or begin != int(path.name):
                raise CorruptIndexFile(f"header inconsistent (slots={slots} capacity={capacity} "
                                       f"count={count} begin={begin})")
        except BaseException:
            os.close(fd)
            raise
        f = cls(path, fd, slots, capacity)
        f.count, f.end_offset, f.begin_ts, f.end_ts = count, end, begin_ts, end_ts
        f.sequence = sequence
        size = os.fstat(fd).st_size
        present = max(0, (size - HEADER_SIZE) // ENTRY.size)
        if present < count:
            logger.warning("key index file torn path=%s count=%d entries_present=%d", path,
                           count, present)
            f.count = present
            f.torn = True
            state = STATE_OPEN
        elif (count and f.entry(count)[1] != end) or (
                state == STATE_CLEAN and size < f.slots_pos + 4 * slots):
            state = STATE_OPEN  # header, entries and slots disagree: rebuilt from the entries
        else:
            f.synced = (count, state)
        return f, state

    @property
    def slots_pos(self) -> int:
        """Where the slot table is (in a clean file): right after the entries."""
        return HEADER_SIZE + self.count * ENTRY.size

    @property
    def full(self) -> bool:
        return self.count >= self.capacity

    # ---- header and slots --------------------------------------------------------------------
    def write_header(self, state: int, count: int | None = None) -> None:
        count = self.count if count is None else count
        end = self.entry(count)[1] if count else -1  # not end_offset: appends may be running
        raw = HEADER.pack(MAGIC, VERSION, state, self.slots, self.capacity, count, self.sequence,
                          self.begin_offset, end, self.begin_ts, self.end_ts)
        self._pwrite(raw.ljust(HEADER_SIZE, b"\0"), 0)

    def load_slots(self) -> None:
        """Take the slot table from disk (a file closed cleanly) to append to it."""
        heads = _empty_slots(self.slots)
        for start in range(0, self.slots, _SLOT_CHUNK):
            want = min(_SLOT_CHUNK, self.slots - start)
            raw = os.pread(self.fd, 4 * want, self.slots_pos + 4 * start)
            chunk = array("I")
            chunk.frombytes(raw.ljust(4 * want, b"\0"))
            if sys.byteorder == "little":
                chunk.byteswap()
            heads[start:start + want] = chunk
        self.heads = heads

    def rebuild_slots(self) -> bool:
        """Rebuild the slot table from the entries (a file not closed cleanly), cutting the
        entries at the first one out of CommitLog order or with a bad chain pointer (a torn
        write). True when entries were cut."""
        heads = _empty_slots(self.slots)
        slots = self.slots
        last = self.begin_offset
        n = 0
        cut = False
        while n < self.count and not cut:
            want = min(_SCAN_CHUNK, self.count - n)
            raw = os.pread(self.fd, want * ENTRY.size, HEADER_SIZE + n * ENTRY.size)
            for h, offset, prev in ENTRY.iter_unpack(raw[:len(raw) - len(raw) % ENTRY.size]):
                if offset < last or prev > n:
                    cut = True
                    break
                n += 1
                heads[slot_of(h, slots)] = n
                last = offset
            else:
                cut = len(raw) < want * ENTRY.size
        if cut:
            logger.warning("key index file entries cut path=%s count=%d kept=%d", self.path,
                           self.count, n)
        self.count = n
        self.end_offset = last if n else -1
        self.heads = heads
        return cut

    def seal(self) -> None:
        """Write the slot table into the file after the entries; readers then read slots
        from it."""
        heads = self.heads
        if heads is not None:
            base = self.slots_pos
            for pos, raw in _slots_to_disk(heads):
                self._pwrite(raw, base + pos)
            self.heads = None

    def sync(self, count: int, clean: bool) -> None:
        """fsync the entries (and slots), then make the header's count durable: the entries
        below ``count`` are a durable point after this."""
        state = STATE_CLEAN if clean else STATE_OPEN
        if self.synced == (count, state):
            return
        self.fsync()
        self.write_header(state, count)
        self.fsync()
        self.synced = (count, state)

    def fsync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise StoreError(f"fsync of key index file {self.path} failed: {exc}") from exc

    # ---- entries -----------------------------------------------------------------------------
    def append(self, hashes: list[int], offsets: list[int], now_ms: int) -> None:
        """Append entries (room checked by the caller); slots point at them once written."""
        heads = self.heads
        assert heads is not None, "append to a sealed key index file"
        slots = self.slots
        n = first = self.count
        staged: dict[int, int] = {}
        get = staged.get
        pack = ENTRY.pack
        parts = []
        for h, offset in zip(hashes, offsets, strict=True):
            n += 1
            slot = (h >> 32) % slots
            parts.append(pack(h, offset, get(slot) or heads[slot]))
            staged[slot] = n
        self._pwrite(b"".join(parts), HEADER_SIZE + first * ENTRY.size)
        for slot, number in staged.items():
            heads[slot] = number
        self.count = n
        self.end_offset = offsets[-1]
        self.end_ts = now_ms

    def entry(self, number: int) -> tuple[int, int, int]:
        """(hash, CommitLog offset, previous) of entry ``number`` (1-based)."""
        raw = os.pread(self.fd, ENTRY.size, HEADER_SIZE + (number - 1) * ENTRY.size)
        if len(raw) < ENTRY.size:
            raise StoreError(f"key index file {self.path} has no entry {number}")
        h, offset, prev = ENTRY.unpack(raw)
        return h, offset, prev

    def chain(self, h: int) -> Iterator[int]:
        """CommitLog offsets of the entries with hash ``h``, newest first."""
        try:
            heads = self.heads
            slot = slot_of(h, self.slots)
            if heads is not None:
                number = heads[slot]
            else:
                (number,) = SLOT.unpack(os.pread(self.fd, 4, self.slots_pos + 4 * slot))
            while 0 < number <= self.capacity:
                eh, offset, prev = self.entry(number)
                if eh == h:
                    yield offset
                if prev >= number:
                    break
                number = prev
        except (OSError, StoreError, struct.error):
            return  # deleted by retention under the reader, or torn: nothing more here

    def first_at_or_after(self, commitlog_offset: int) -> int:
        """How many entries point below ``commitlog_offset`` (entries are in CommitLog order)."""
        low, high = 0, self.count
        while low < high:
            mid = (low + high) // 2
            if self.entry(mid + 1)[1] < commitlog_offset:
                low = mid + 1
            else:
                high = mid
        return low

    def trim(self) -> None:
        """Cut the file after its ``count`` entries (entries written past the last durable
        point of a file not closed cleanly are written again from the CommitLog)."""
        try:
            os.ftruncate(self.fd, self.slots_pos)
        except OSError as exc:
            raise StoreError(f"truncate of key index file {self.path} failed: {exc}") from exc

    def cut(self, keep: int) -> None:
        """Drop the entries past the first ``keep`` (the file must hold its slots in memory):
        each dropped entry's slot goes back to the entry it pointed past."""
        heads = self.heads
        assert heads is not None
        for number in range(self.count, keep, -1):
            h, _, prev = self.entry(number)
            slot = slot_of(h, self.slots)
            if heads[slot] == number:
                heads[slot] = prev
        self.end_offset = self.entry(keep)[1] if keep else -1
        self.count = keep
        self.trim()

    # ---- files ---------------------------------------------------------------------------------
    def _pwrite(self, data: bytes, pos: int) -> None:
        pwrite_all(self.fd, data, pos, f"key index file {self.path}")

    def unlink(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            logger.warning("key index file already gone path=%s", self.path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
