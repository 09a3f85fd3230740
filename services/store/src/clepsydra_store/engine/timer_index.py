"""The timer index (issue 15, SPEC T1): which timer-log entries fall due when, on disk.

Time-bucketed slot files: one file per second of deliver time, ``<hour>/<second>`` under
``data_dir/timerslots/``, each an append-only list of 16-byte ``(timer-log queue offset,
deliver ts)`` pairs in arrival order. The timer log itself is the ConsumeQueue of
``TIMER_TOPIC_XXXX`` queue 0 (tagsCode = deliver time, or a sentinel of
:mod:`~clepsydra_store.engine.entry_states` once handed over or cancelled); a slot pair is
live only while that entry's code still equals the pair's time, so duplicates (a re-dispatch
after a crash) and stale pairs (cancelled, rescheduled, handed over) cost a read, never a
second delivery.

Memory stays flat in the number of pending timers: nothing is held per timer; a hand-over
reads the due slot files (one second each), and the next due time is one integer. A slot file
whose pairs are all done is unlinked only after the flush that checkpoints the hand-over copies
that emptied it (:meth:`TimerIndex.take_unlinks`, :meth:`TimerIndex.unlink`), so a crash never
loses the pairs of timers whose copies it lost. Recovery needs no file of its own: the
re-dispatch of the CommitLog from the checkpoint appends the pairs of the parked records again
(``Dispatcher.redispatch``), as it rewrites ConsumeQueue entries.

Why slots and not a wheel: RocketMQ 5's wheel (RIP-43) holds one slot per tick of a fixed span
(3 days by default) and re-queues what lies beyond; a year at millisecond precision would need
a wheel of billions of slots or a hierarchy. Slot files named by time cover any span with
files only where timers are, their order is the directory listing's, and a second's file is
small enough to sort in memory when it falls due.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

from clepsydra_store.engine.segment import fsync_dir

SLOT_MS = 1000
"""Deliver times one slot file covers."""
HOUR_MS = 3_600_000
PAIR = struct.Struct("<qq")
"""(timer-log queue offset, deliver ts)."""
_OPEN_FILES = 64
"""Slot files kept open for appending (the seconds timers are being written to)."""
NO_TIMER = -1

CodesOf = Callable[[list[int]], list[int | None]]
"""Timer-log queue offsets -> their entries' tagsCodes now (None: no such entry)."""


class TimerIndex:
    """The slot files. Writers hold the store's writer lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._fds: OrderedDict[int, int] = OrderedDict()
        """slot -> an fd open for appending (LRU)."""
        self._dirty: set[int] = set()
        self._floor = 0
        """Slots below this one are emptied and waiting to be unlinked: nothing is added
        to them (a late pair goes to the floor's slot)."""
        self._unlinks: list[int] = []
        """Emptied slots, unlinked after the next checkpoint."""
        self._proposed: list[int] = []
        self.next_due: int = NO_TIMER
        """A lower bound of the earliest pending deliver time (NO_TIMER: none known)."""
        self.wake = threading.Event()
        """Set when a timer due before :attr:`next_due` is added (a waiting hand-over)."""

    # ---- paths -------------------------------------------------------------------------
    def _path(self, slot: int) -> Path:
        return self.directory / f"{slot * SLOT_MS // HOUR_MS:08d}" / f"{slot:012d}"

    def slots(self) -> Iterator[int]:
        """Slot numbers with a file, in time order (lists one hour folder at a time)."""
        try:
            hours = sorted(int(h) for h in os.listdir(self.directory) if h.isdigit())
        except FileNotFoundError:
            return
        for hour in hours:
            try:
                names = os.listdir(self.directory / f"{hour:08d}")
            except FileNotFoundError:
                continue
            yield from sorted(int(n) for n in names if n.isdigit())

    # ---- write (writer lock) --------------------------------------------------------------
    def add(self, queue_offset: int, deliver_ts: int) -> None:
        """A parked timer (live dispatch and re-dispatch alike)."""
        slot = max(deliver_ts // SLOT_MS, self._floor)
        fd = self._fds.get(slot)
        if fd is None:
            path = self._path(slot)
            if not path.parent.is_dir():
                path.parent.mkdir(parents=True, exist_ok=True)
                fsync_dir(self.directory)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[slot] = fd
            if len(self._fds) > _OPEN_FILES:
                old, old_fd = self._fds.popitem(last=False)
                if old in self._dirty:
                    os.fsync(old_fd)
                    self._dirty.discard(old)
                os.close(old_fd)
        else:
            self._fds.move_to_end(slot)
        os.write(fd, PAIR.pack(queue_offset, deliver_ts))
        self._dirty.add(slot)
        if self.next_due == NO_TIMER or deliver_ts < self.next_due:
            self.next_due = deliver_ts
            self.wake.set()

    def read(self, slot: int) -> list[tuple[int, int]]:
        """The pairs of a slot, first of each queue offset only."""
        try:
            raw = self._path(slot).read_bytes()
        except FileNotFoundError:
            return []
        seen: set[int] = set()
        out: list[tuple[int, int]] = []
        for queue_offset, ts in PAIR.iter_unpack(raw[:len(raw) - len(raw) % PAIR.size]):
            if queue_offset not in seen:
                seen.add(queue_offset)
                out.append((queue_offset, ts))
        return out

    def due(self, now_ms: int, max_count: int, codes_of: CodesOf) -> list[tuple[int, int]]:
        """Up to ``max_count`` live pairs due at ``now_ms``, earliest first, and
        :attr:`next_due` brought up to date. Slots found emptied are proposed for unlinking:
        :meth:`confirm` (once the hand-over of the pairs is appended) retires them."""
        out: list[tuple[int, int]] = []
        prefix = True
        """Every slot so far is emptied (only a prefix of the slots is ever retired)."""
        self._proposed = []
        self.next_due = NO_TIMER
        for slot in self.slots():
            if slot < self._floor:
                continue
            pairs = self.read(slot)
            codes = codes_of([q for q, _ in pairs])
            live = [p for p, code in zip(pairs, codes, strict=True) if code == p[1]]
            now_due = sorted((p for p in live if p[1] <= now_ms), key=lambda p: p[1])
            room = max(max_count - len(out), 0)
            out += now_due[:room]
            later = [ts for _, ts in live if ts > now_ms] + [ts for _, ts in now_due[room:]]
            if later:
                self.next_due = min(later)
            if prefix and not later and (slot + 1) * SLOT_MS - 1 <= now_ms:
                self._proposed.append(slot)
            else:
                prefix = False
            if later:  # (a full batch reads on to the next live pair, for next_due)
                break
        return out

    def confirm(self) -> None:
        """Retire the slots the last :meth:`due` found emptied (writer lock)."""
        for slot in self._proposed:
            self._floor = slot + 1
            self._unlinks.append(slot)
            fd = self._fds.pop(slot, None)
            if fd is not None:
                os.close(fd)
            self._dirty.discard(slot)
        self._proposed = []

    # ---- durability (flush) -----------------------------------------------------------------
    def fsync(self) -> None:
        for slot in list(self._dirty):
            fd = self._fds.get(slot)
            if fd is not None:
                os.fsync(fd)
            self._dirty.discard(slot)

    def take_unlinks(self) -> list[int]:
        """Emptied slots to unlink once this flush's checkpoint is written (writer lock)."""
        taken, self._unlinks = self._unlinks, []
        return taken

    def unlink(self, slots: list[int]) -> None:
        for slot in slots:
            path = self._path(slot)
            path.unlink(missing_ok=True)
            try:
                path.parent.rmdir()  # the hour's last slot
            except OSError:
                pass

    def reset(self) -> None:
        """Drop every slot file (a recovery that re-dispatches the whole CommitLog)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._floor = 0
        self._unlinks = []
        self.next_due = NO_TIMER

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._dirty.clear()
