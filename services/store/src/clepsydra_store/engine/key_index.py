"""Key index: message keys (``KEYS``, space-separated) and ``UNIQ_KEY`` -> CommitLog offsets.

Persisted append-only in data_dir/index/keys.idx as 16-byte entries ``hash64 u64 | offset i64``
and loaded into memory at start. A hash only narrows the search: readers verify by reading the
record (collisions) and filter by topic.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_store.engine.segment import write_file_atomic

logger = logging.getLogger(__name__)

ENTRY = struct.Struct(">Qq")


def key_hash(key: str) -> int:
    """Stable 64-bit hash of a key (crc32 and adler32 of its UTF-8 bytes)."""
    return key_hash_of(key.encode())


def key_hash_of(raw: bytes) -> int:
    """:func:`key_hash` of a key already encoded as UTF-8."""
    return (zlib.crc32(raw) << 32) | zlib.adler32(raw)


class KeyIndex:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / naming.KEY_INDEX_FILE
        self._offsets: dict[int, int | list[int]] = {}
        """hash -> offset, or a sorted list of offsets when several records share it (ints
        stay out of the garbage collector's way)."""
        self._pending: list[bytes] = []
        self._dirty = False
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def load(self, commitlog_end: int) -> None:
        """Read the file; entries at or past the recovered CommitLog end (and a torn tail)
        are dropped from it (P3)."""
        with open(self.path, "rb") as f:
            raw = f.read()
        whole = len(raw) - len(raw) % ENTRY.size
        kept = bytearray()
        dropped = len(raw) != whole
        for key, commitlog_offset in ENTRY.iter_unpack(raw[:whole]):
            if commitlog_offset >= commitlog_end:
                dropped = True
                continue
            kept += ENTRY.pack(key, commitlog_offset)
            self._insert(key, commitlog_offset, dedupe=True)
        if dropped:
            logger.warning("key index entries past commitlog end dropped path=%s "
                           "commitlog_end=%d kept=%d", self.path, commitlog_end,
                           len(kept) // ENTRY.size)
            os.close(self._fd)
            write_file_atomic(self.path, bytes(kept))
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)

    def _insert(self, h: int, commitlog_offset: int, *, dedupe: bool) -> bool:
        """Record h -> offset in memory; False when deduplicated away."""
        offsets = self._offsets
        values = offsets.get(h)
        if values is None:
            offsets[h] = commitlog_offset
            return True
        if isinstance(values, int):
            if dedupe and values == commitlog_offset:
                return False
            offsets[h] = sorted((values, commitlog_offset))
            return True
        if dedupe and commitlog_offset in values:
            return False
        values.append(commitlog_offset)
        if dedupe:
            values.sort()
        return True

    def add(self, keys: list[str], commitlog_offset: int, *, dedupe: bool = False) -> None:
        """Index a record's keys (the caller then calls :meth:`write_pending`)."""
        pack = ENTRY.pack
        for key in keys:
            h = key_hash_of(key.encode())
            if self._insert(h, commitlog_offset, dedupe=dedupe):
                self._pending.append(pack(h, commitlog_offset))

    def add_many(self, hashes: list[int], commitlog_offsets: list[int]) -> None:
        """:meth:`add` for keys already hashed (``key_hash``), one offset per hash."""
        offsets = self._offsets
        if offsets.keys().isdisjoint(hashes) and len(set(hashes)) == len(hashes):
            offsets.update(zip(hashes, commitlog_offsets, strict=True))  # all new
        else:
            for h, commitlog_offset in zip(hashes, commitlog_offsets, strict=True):
                values = offsets.get(h)  # as _insert(dedupe=False)
                if values is None:
                    offsets[h] = commitlog_offset
                elif isinstance(values, int):
                    offsets[h] = sorted((values, commitlog_offset))
                else:
                    values.append(commitlog_offset)
        self._pending += map(ENTRY.pack, hashes, commitlog_offsets)

    def write_pending(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending = []
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            raise StoreError(f"write to key index {self.path} failed: {exc}") from exc
        self._dirty = True

    def lookup(self, key: str) -> list[int]:
        """CommitLog offsets whose record may carry ``key`` (oldest first)."""
        values = self._offsets.get(key_hash(key))
        if values is None:
            return []
        return [values] if isinstance(values, int) else list(values)

    def fsync(self) -> None:
        if self._dirty:
            self._dirty = False
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
