"""Key index: message keys (``KEYS``, space-separated) and ``UNIQ_KEY`` -> CommitLog offsets, on
disk (DEC-key-index-on-disk; RocketMQ's IndexFile).

Files of hash slots and chained entries (``key_index_file.py``) under data_dir/index/keys/,
rolled when full, read and written through the page cache, deleted with the CommitLog's
retention (a file whose newest entry is below the oldest kept CommitLog offset goes). Memory is
the active file's slot table, fixed by its size, whatever the number of keys held. A hash only
narrows the search: readers verify by reading the record (collisions) and filter by topic.

The index is derived data. Entries are appended in CommitLog order; a flush makes them durable
and writes each file's count (a durable point) before the checkpoint is written, so a restart
re-dispatches what follows the checkpoint and finds the entries before it. What start finds
damaged (a torn header, entries out of order) is cut there and :attr:`KeyIndex.rebuild_from`
says from which CommitLog offset recovery must derive the rest; nothing past the recovered
CommitLog end is kept (:meth:`KeyIndex.truncate_from`). A ``keys.idx`` of the format before
(one file loaded whole into memory) is deleted at start and the index rebuilt from the CommitLog.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_store.engine.config import DEFAULT_KEY_INDEX_ENTRIES_PER_FILE
from clepsydra_store.engine.index.key_index_file import (
    STATE_CLEAN,
    CorruptIndexFile,
    IndexFile,
)
from clepsydra_store.engine.log.segment import fsync_dir, list_segment_starts

logger = logging.getLogger(__name__)

ENTRIES_PER_SLOT = 4
"""Slots of a file = its entries / this (RocketMQ: 20 M entries over 5 M slots)."""


def key_hash(key: str) -> int:
    """Stable 64-bit hash of a key (crc32 and adler32 of its UTF-8 bytes)."""
    return key_hash_of(key.encode())


def key_hash_of(raw: bytes) -> int:
    """:func:`key_hash` of a key already encoded as UTF-8."""
    return (zlib.crc32(raw) << 32) | zlib.adler32(raw)


def record_keys(props: dict[str, str]) -> list[str]:
    """The index keys of a message: its KEYS (space-separated) and its UNIQ_KEY; a cancel
    tombstone's: the msgId it cancels (``ORIGIN_MESSAGE_ID``), so a message's history finds
    when it was cancelled (DEC-message-history). Readers check the key on the record: a look-up
    by msgId or key never returns a tombstone (it has neither UNIQ_KEY nor KEYS)."""
    keys = props.get(P.KEYS, "").split()
    uniq = props.get(P.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    elif P.CANCEL_OF in props and props.get(P.ORIGIN_MESSAGE_ID):
        keys.append(props[P.ORIGIN_MESSAGE_ID])
    return keys


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class KeyIndex:
    def __init__(self, directory: Path, *,
                 entries_per_file: int = DEFAULT_KEY_INDEX_ENTRIES_PER_FILE) -> None:
        """Open the index files under ``directory`` (data_dir/index), repairing what a crash
        left (see the module's docstring)."""
        self.directory = directory
        self.path = directory / naming.KEY_INDEX_DIR
        self.entries_per_file = entries_per_file
        self.slots_per_file = max(1, entries_per_file // ENTRIES_PER_SLOT)
        self._lock = threading.Lock()
        """Held to change the file list and to snapshot what a flush makes durable."""
        self._files: tuple[IndexFile, ...] = ()
        """Oldest first (copy-on-write: readers take one snapshot)."""
        self._graveyard: list[IndexFile] = []
        self._hashes: list[int] = []
        self._offsets: list[int] = []
        self.last_offset = -1
        """CommitLog offset of the newest record indexed (or pending)."""
        self.rebuild_from: int | None = None
        """CommitLog offset from which recovery must index the records again (files damaged,
        missing or of the format before), None when the files hold everything up to the
        checkpoint."""
        self._open()

    # ---- start -------------------------------------------------------------------------------
    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        legacy = self.directory / naming.KEY_INDEX_FILE
        if legacy.exists():
            logger.warning("key index of the previous format found path=%s: deleted, the index "
                           "is rebuilt from the CommitLog", legacy)
            shutil.rmtree(self.path, ignore_errors=True)
            legacy.unlink()
        if not self.path.is_dir():
            self.rebuild_from = 0
            self.path.mkdir()
            fsync_dir(self.directory)
        starts = list_segment_starts(self.path)
        files: list[IndexFile] = []
        for i, start in enumerate(starts):
            path = self.path / naming.segment_file_name(start)
            try:
                f = self._open_file(path, last=i == len(starts) - 1)
            except (CorruptIndexFile, OSError) as exc:
                logger.warning("key index file unreadable path=%s: %s; it and later files are "
                               "rebuilt from the CommitLog", path, exc)
                self._rebuild_after(start, starts[i:])
                break
            if files and f.sequence != files[-1].sequence + 1:
                logger.warning("key index file missing before path=%s; it and later files are "
                               "rebuilt from the CommitLog", path)
                f.close()
                self._rebuild_after(files[-1].end_offset + 1, starts[i:])
                break
            if f.count == 0:
                f.unlink()
                f.close()
                self._rebuild_after(start, starts[i + 1:])
                break
            files.append(f)
            if not f.full and i < len(starts) - 1:  # a gap before the next file
                self._rebuild_after(f.end_offset + 1, starts[i + 1:])
                break
        self._files = tuple(files)
        if files:
            self.last_offset = files[-1].end_offset
            last = files[-1]
            if last.heads is not None and last.full:
                last.seal()
                last.sync(last.count, clean=True)
        logger.info("key index opened path=%s files=%d entries=%d rebuild_from=%s", self.path,
                    len(files), sum(f.count for f in files), self.rebuild_from)

    def _open_file(self, path: Path, *, last: bool) -> IndexFile:
        f, state = IndexFile.open(path)
        try:
            if state == STATE_CLEAN:
                if last and not f.full:
                    f.load_slots()  # it takes entries again: a crash from now on rebuilds
                    f.trim()
                    f.sync(f.count, clean=False)
                return f
            logger.warning("key index file not closed cleanly path=%s count=%d: slots rebuilt "
                           "from its entries", path, f.count)
            if f.rebuild_slots() or f.torn:
                self._rebuild_at(f.end_offset + 1 if f.count else f.begin_offset)
            f.trim()
            if last and not f.full:
                f.sync(f.count, clean=False)
            else:
                f.seal()
                f.sync(f.count, clean=True)
            return f
        except BaseException:
            f.close()
            raise

    def _rebuild_at(self, commitlog_offset: int) -> None:
        if self.rebuild_from is None or commitlog_offset < self.rebuild_from:
            self.rebuild_from = commitlog_offset

    def _rebuild_after(self, commitlog_offset: int, doomed: list[int]) -> None:
        """Delete the files starting at ``doomed``; the index is derived again from
        ``commitlog_offset`` on."""
        self._rebuild_at(commitlog_offset)
        for start in doomed:
            (self.path / naming.segment_file_name(start)).unlink(missing_ok=True)
        fsync_dir(self.path)

    def load(self, commitlog_end: int) -> None:
        """Drop entries at or past ``commitlog_end`` (the CommitLog as found at start, P3)."""
        self.truncate_from(commitlog_end)

    def truncate_from(self, commitlog_offset: int) -> None:
        """Remove every entry at or past ``commitlog_offset`` (the recovered CommitLog end:
        the index is never trusted past it)."""
        with self._lock:
            files = list(self._files)
            gone = []
            while files and files[-1].begin_offset >= commitlog_offset:
                gone.append(files.pop())
            if files:
                f = files[-1]
                keep = f.first_at_or_after(commitlog_offset)
                if keep < f.count:
                    if f.heads is None:
                        f.load_slots()
                    logger.warning("key index entries past the commitlog end dropped path=%s "
                                   "commitlog_end=%d kept=%d of %d", f.path, commitlog_offset,
                                   keep, f.count)
                    f.cut(keep)
                    f.sync(keep, clean=False)
            self._files = tuple(files)
            self.last_offset = files[-1].end_offset if files else min(self.last_offset,
                                                                     commitlog_offset - 1)
        for f in gone:
            logger.warning("key index file past the commitlog end deleted path=%s", f.path)
            f.unlink()
            f.close()
        if gone:
            fsync_dir(self.path)

    # ---- write (caller holds the writer lock) ----------------------------------------------
    def add(self, keys: list[str], commitlog_offset: int, *, dedupe: bool = False) -> None:
        """Index a record's keys (the caller then calls :meth:`write_pending`). Records come in
        CommitLog order; ``dedupe`` skips a record already indexed (recovery)."""
        if not keys or (dedupe and commitlog_offset <= self.last_offset):
            return
        for key in keys:
            self._hashes.append(key_hash_of(key.encode()))
            self._offsets.append(commitlog_offset)
        self.last_offset = commitlog_offset

    def add_many(self, hashes: list[int], commitlog_offsets: list[int]) -> None:
        """:meth:`add` for keys already hashed (``key_hash``), one offset per hash."""
        if hashes:
            self._hashes += hashes
            self._offsets += commitlog_offsets
            self.last_offset = commitlog_offsets[-1]

    def write_pending(self) -> None:
        hashes, offsets = self._hashes, self._offsets
        if not hashes:
            return
        self._hashes, self._offsets = [], []
        now = _now_ms()
        done, total = 0, len(hashes)
        while done < total:
            f = self._active(offsets[done], now)
            upto = min(total, done + f.capacity - f.count)
            if done == 0 and upto == total:
                f.append(hashes, offsets, now)
            else:
                f.append(hashes[done:upto], offsets[done:upto], now)
            done = upto

    def _active(self, commitlog_offset: int, now_ms: int) -> IndexFile:
        """The file taking entries, a new one when there is none or it is full."""
        files = self._files
        if files and files[-1].heads is not None and not files[-1].full:
            return files[-1]
        with self._lock:
            if files:
                files[-1].seal()
            f = IndexFile.create(self.path, commitlog_offset, self.slots_per_file,
                                 self.entries_per_file, now_ms,
                                 files[-1].sequence + 1 if files else 1)
            fsync_dir(self.path)
            self._files = (*files, f)
        logger.info("key index file created path=%s", f.path)
        return f

    # ---- read (any thread) ---------------------------------------------------------------
    def newest(self, key: str) -> Iterator[int]:
        """CommitLog offsets whose record may carry ``key``, newest first (lazily: a reader
        stops when it has what it wants)."""
        h = key_hash(key)
        previous = -1
        for f in reversed(self._files):
            for commitlog_offset in f.chain(h):
                if commitlog_offset != previous:  # a record listing a key twice
                    previous = commitlog_offset
                    yield commitlog_offset

    def lookup(self, key: str) -> list[int]:
        """CommitLog offsets whose record may carry ``key`` (oldest first)."""
        offsets = list(self.newest(key))
        offsets.reverse()
        return offsets

    # ---- durability / retention ------------------------------------------------------------
    def fsync(self) -> None:
        """Make the entries written so far durable, then each file's count (its durable
        point); called by the flush before the checkpoint is written."""
        with self._lock:
            todo = [(f, f.count, f.heads is None) for f in self._files]
        for f, count, sealed in todo:
            f.sync(count, clean=sealed)

    def drop_below(self, commitlog_min: int) -> int:
        """Delete the files whose newest entry is below ``commitlog_min`` (retention, P4);
        those dropped the time before are closed now (readers may still have held them).
        Returns how many files were deleted."""
        for f in self._graveyard:
            f.close()
        self._graveyard = []
        with self._lock:
            files = self._files
            count = 0
            while count < len(files) and files[count].end_offset < commitlog_min:
                count += 1
            gone, self._files = files[:count], files[count:]
        for f in gone:
            logger.info("key index file deleted by retention path=%s end_offset=%d", f.path,
                        f.end_offset)
            f.unlink()
            self._graveyard.append(f)
        if gone:
            fsync_dir(self.path)
        return len(gone)

    def stats(self) -> dict[str, float]:
        files = self._files
        return {"key_index_files": len(files), "key_index_entries": sum(f.count for f in files)}

    def close(self) -> None:
        """Write the active file's slots and mark every file clean (a fast next start)."""
        with self._lock:
            for f in self._files:
                f.seal()
                f.sync(f.count, clean=True)
                f.close()
            for f in self._graveyard:
                f.close()
            self._files = ()
            self._graveyard = []
