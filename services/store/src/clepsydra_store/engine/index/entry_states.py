"""Entry states (SPEC T1): a schedule entry (level queue or timer log) that was cancelled, or a
timer-log entry that was handed over, has its tagsCode replaced by a negative sentinel. The
change is derived from a CommitLog record (a cancel tombstone, a hand-over copy), so recovery
re-derives it by re-dispatching those records.

A sentinel reaches the ConsumeQueue file only at a flush, and only for records at or below the
offset that flush checkpoints (:meth:`EntryStates.take` under the writer lock with that offset,
:meth:`EntryStates.apply` after the CommitLog is fsync'd): a machine crash that loses the
record's bytes can never leave its sentinel on disk (SPEC P3). Until then the sentinel
lives here, and every reader asks :meth:`EntryStates.code` (memory: the changes of one flush
interval, not the pending timers).

A reader takes the sentinels (:meth:`EntryStates.of_queue`, :meth:`EntryStates.override`)
*before* it reads the entries from the file: :meth:`EntryStates.apply` writes the file first and
forgets the sentinel after, so a reader that looked in the other order could see neither (the
old code in the file, the sentinel already gone) and hand an entry over twice.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from clepsydra_store.engine.index.consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue

DELIVERED = -1
"""tagsCode of a timer-log entry already handed to its real topic."""
CANCELLED = -2
"""tagsCode of a cancelled (or rescheduled) schedule entry: never handed over."""

_Changes = dict[ConsumeQueue, dict[int, int]]
_CODE = struct.Struct(">q")
_CODE_AT = ENTRY.size - _CODE.size
"""The tagsCode of an entry: its last 8 bytes (``QueueEntry.LAYOUT``)."""
_RUN_MAX = 4096
"""Most entries one write of :meth:`EntryStates.apply` rewrites (80 KiB)."""


class EntryStates:
    """Sentinels not yet written to their ConsumeQueue files."""

    def __init__(self) -> None:
        self._pending: _Changes = {}
        """Set since the last :meth:`take` (caller holds the writer lock)."""
        self._applying: _Changes = {}
        """Taken by a flush, being written to the files."""

    def set(self, cq: ConsumeQueue, queue_offset: int, code: int) -> None:
        """Record a sentinel (caller holds the writer lock). CANCELLED wins over DELIVERED
        only for an entry not handed over; a hand-over never follows a cancel, so the last
        one set is the state."""
        self._pending.setdefault(cq, {})[queue_offset] = code

    def of_queue(self, cq: ConsumeQueue) -> dict[int, int]:
        """A copy of the unwritten sentinels of ``cq``, taken before its entries are read."""
        applying, pending = self._applying.get(cq), self._pending.get(cq)
        return {**(applying or {}), **(pending or {})}

    def overrides(self, cq: ConsumeQueue, queue_offsets: list[int]) -> dict[int, int]:
        """The unwritten sentinels of these entries of ``cq`` (as :meth:`of_queue`, asked
        before the entries are read), looked up one by one: a timer drain sets one sentinel
        per entry handed over, so copying them all on each read would cost as much as the
        reads (DEC-drain-splice-shapes)."""
        pending = self._pending.get(cq) or {}
        applying = self._applying.get(cq) or {}
        out: dict[int, int] = {}
        if not (pending or applying):
            return out
        for q in queue_offsets:
            code = pending.get(q)
            if code is None:
                code = applying.get(q)
            if code is not None:
                out[q] = code
        return out

    def override(self, cq: ConsumeQueue, queue_offset: int) -> int | None:
        """The entry's unwritten sentinel (None: its file's code stands), asked before the
        entry is read."""
        pending = self._pending.get(cq)
        if pending is not None and queue_offset in pending:
            return pending[queue_offset]
        applying = self._applying.get(cq)
        if applying is not None:
            return applying.get(queue_offset)
        return None

    def pending(self, cq: ConsumeQueue, first: int,
                chunk: int = 65_536) -> Iterator[tuple[int, int, int, int]]:
        """The entries of ``cq`` from ``first`` on that are pending - present, neither handed
        over nor cancelled (their unwritten sentinels taken first) - as (queue offset,
        CommitLog offset, size, code), read ``chunk`` entries at a time."""
        states = self.of_queue(cq)
        queue_offset = first
        while queue_offset < cq.max_offset:
            raw = cq.read_raw(queue_offset, chunk)
            if not raw:
                break
            for i, (commitlog_offset, size, code) in enumerate(ENTRY.iter_unpack(raw)):
                code = states.get(queue_offset + i, code)
                if size > 0 and code >= 0:  # not a sentinel
                    yield queue_offset + i, commitlog_offset, size, code
            queue_offset += len(raw) // ENTRY_SIZE

    def take(self) -> _Changes:
        """The sentinels to write at this flush (caller holds the writer lock)."""
        taken, self._pending = self._pending, {}
        for cq, changes in taken.items():
            self._applying.setdefault(cq, {}).update(changes)
        return taken

    def apply(self, taken: _Changes) -> None:
        """Write ``taken`` into the ConsumeQueue files (then the caller fsyncs them)."""
        for cq, changes in taken.items():
            offsets = sorted(changes)
            i = 0
            while i < len(offsets):  # a run of consecutive entries: one read, one write
                first = offsets[i]
                j = i + 1
                while (j < len(offsets) and offsets[j] == first + j - i
                       and j - i < _RUN_MAX):
                    j += 1
                raw = cq.read_raw(first, j - i)
                entries = bytearray(raw[:len(raw) - len(raw) % ENTRY_SIZE])
                if entries:
                    for k in range(len(entries) // ENTRY_SIZE):
                        _CODE.pack_into(entries, k * ENTRY_SIZE + _CODE_AT, changes[first + k])
                    cq.write(first, bytes(entries))
                i = j
            applying = self._applying.get(cq)
            if applying is not None:
                for queue_offset, code in changes.items():
                    if applying.get(queue_offset) == code:
                        del applying[queue_offset]
                if not applying:
                    del self._applying[cq]

    def clear(self) -> None:
        self._pending = {}
        self._applying = {}
