"""The ordered files of one segmented log (RocketMQ's ``MappedFileQueue``): fixed-size
:class:`~clepsydra_store.engine.log.segment.Segment` files of one folder, each named by the
20-digit offset of its first byte, shared by the CommitLog (segments of records) and each
ConsumeQueue (files of 20-byte entries).

The list is copy-on-write: readers take :attr:`SegmentQueue.view` once and see a consistent
``(starts, segments)`` pair while the writer (under the store's writer lock) creates, drops or
removes files. A removed file is unlinked, not closed: a reader may still hold it, so the
caller closes it later (retention keeps such files until its next run).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path

from clepsydra_store.engine.log.segment import Segment, fsync_dir, list_segment_starts

SegmentView = tuple[list[int], list[Segment]]
"""(start offsets, segments), oldest first."""


class SegmentQueue:
    """The segment files of ``directory``, each ``capacity`` bytes long at most."""

    __slots__ = ("capacity", "directory", "view")

    def __init__(self, directory: Path, capacity: int, *, aligned: bool = False) -> None:
        """Open the files already there (``aligned``: only those whose start is a multiple of
        ``capacity``, as a ConsumeQueue's files are; any other name is ignored)."""
        self.directory = directory
        self.capacity = capacity
        directory.mkdir(parents=True, exist_ok=True)
        starts = [s for s in list_segment_starts(directory)
                  if not aligned or s % capacity == 0]
        self.view: SegmentView = ([], [])
        self._set([Segment(directory, s, capacity, create=False) for s in starts])

    def _set(self, segments: list[Segment]) -> None:
        self.view = ([s.start for s in segments], segments)

    @property
    def segments(self) -> list[Segment]:
        return self.view[1]

    @property
    def starts(self) -> list[int]:
        return self.view[0]

    def __len__(self) -> int:
        return len(self.view[1])

    def find(self, offset: int) -> Segment | None:
        """The segment holding logical ``offset``, None when no file covers it."""
        starts, segments = self.view
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        segment = segments[i]
        return segment if offset < segment.end else None

    def create(self, start: int) -> Segment:
        """A new (empty) file starting at ``start``, in its place in the order; its name made
        durable."""
        segment = Segment(self.directory, start, self.capacity, create=True)
        fsync_dir(self.directory)
        segments = list(self.segments)
        segments.insert(bisect.bisect_left(self.starts, start), segment)
        self._set(segments)
        return segment

    def drop_from(self, index: int) -> list[Segment]:
        """Unlink and close the files from ``index`` on (a torn tail, an aborted append):
        they are the newest, nothing reads them. Returns them."""
        segments = self.segments
        dropped = segments[index:]
        if not dropped:
            return []
        self._set(segments[:index])
        for segment in dropped:
            segment.unlink()
            segment.close()
        fsync_dir(self.directory)
        return dropped

    def remove_head(self, count: int) -> list[Segment]:
        """Take the ``count`` oldest files out of the list and unlink them; the caller closes
        them later (readers may hold them). Returns them."""
        segments = self.segments
        removed = segments[:count]
        if not removed:
            return []
        self._set(segments[count:])
        for segment in removed:
            segment.unlink()
        fsync_dir(self.directory)
        return removed

    def close(self, extra: Iterable[Segment] = ()) -> None:
        for segment in (*self.segments, *extra):
            segment.close()
