"""One fixed-size file of a segmented log, written with ``os.write`` on an fd (no userspace
buffer: a SIGKILL right after a write loses nothing written) and read with ``os.pread``.

Used by the CommitLog (segments named by their 20-digit start byte offset) and by the
ConsumeQueues (files of a fixed number of 20-byte entries, named the same way).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError

logger = logging.getLogger(__name__)



def pwrite_all(fd: int, data: bytes, pos: int, what: str) -> None:
    """Write all of ``data`` at byte ``pos`` of ``fd``, looping only on a short write;
    StoreError naming ``what`` on failure (the segments and the key index files)."""
    try:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, pos)
            pos += n
            view = view[n:]
    except OSError as exc:
        raise StoreError(f"write to {what} failed: {exc}") from exc

class Segment:
    """A file covering logical offsets ``[start, start + capacity)``; ``written`` bytes of it
    hold data (the file is not pre-allocated, so its length is what was written)."""

    __slots__ = ("capacity", "closed", "fd", "path", "start", "written")

    def __init__(self, directory: Path, start: int, capacity: int, *, create: bool) -> None:
        self.start = start
        self.capacity = capacity
        self.path = directory / naming.segment_file_name(start)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self.fd = os.open(self.path, flags, 0o644)
            self.written = os.fstat(self.fd).st_size
        except OSError as exc:
            raise StoreError(f"cannot open segment {self.path}: {exc}") from exc
        self.closed = False

    @property
    def end(self) -> int:
        """First logical offset past this segment."""
        return self.start + self.capacity

    @property
    def write_offset(self) -> int:
        """Logical offset of the next byte appended."""
        return self.start + self.written

    def append(self, data: bytes) -> None:
        """Write ``data`` at the end of the file: one syscall (``pwrite`` at the end, so no
        seek), looping only on a short write."""
        self.pwrite(data, self.written)

    def pwrite(self, data: bytes, file_pos: int) -> None:
        """Write ``data`` at byte ``file_pos`` of the file (idempotent re-dispatch)."""
        pwrite_all(self.fd, data, file_pos, f"segment {self.path}")
        self.written = max(self.written, file_pos + len(data))

    def read(self, file_pos: int, size: int) -> bytes:
        """Up to ``size`` bytes from byte ``file_pos`` of the file (short at the end)."""
        try:
            return os.pread(self.fd, size, file_pos)
        except OSError as exc:
            raise StoreError(f"read from segment {self.path} failed: {exc}") from exc

    def read_into(self, buffer: bytearray, file_pos: int, size: int) -> bool:
        """Read ``size`` bytes from byte ``file_pos`` of the file into the start of
        ``buffer`` (at least ``size`` long; no new buffer allocated); False when fewer were
        there."""
        try:
            return os.preadv(self.fd, [memoryview(buffer)[:size]], file_pos) == size
        except OSError as exc:
            raise StoreError(f"read from segment {self.path} failed: {exc}") from exc

    def read_all(self) -> bytes:
        return self.read(0, self.written)

    def fsync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise StoreError(f"fsync of segment {self.path} failed: {exc}") from exc

    def truncate(self, file_pos: int) -> None:
        """Cut the file to ``file_pos`` bytes (a torn tail after a crash, P3)."""
        try:
            os.ftruncate(self.fd, file_pos)
            os.fsync(self.fd)
        except OSError as exc:
            raise StoreError(f"truncate of segment {self.path} failed: {exc}") from exc
        self.written = file_pos

    def mtime_ms(self) -> int:
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except OSError:
            return 0

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def unlink(self) -> None:
        """Remove the file; the fd stays open until :meth:`close` (readers in flight)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            logger.warning("segment already gone path=%s", self.path)


def list_segment_starts(directory: Path) -> list[int]:
    """Start offsets of the segment files in ``directory`` (ignoring other names), sorted."""
    if not directory.is_dir():
        return []
    starts = []
    for entry in directory.iterdir():
        name = entry.name
        if len(name) == 20 and name.isdigit():
            starts.append(int(name))
    return sorted(starts)


def fsync_dir(directory: Path) -> None:
    """Make a created/renamed/deleted name in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
