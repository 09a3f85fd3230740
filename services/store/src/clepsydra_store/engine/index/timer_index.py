"""The timer index (SPEC T1, DEC-timer-slot-files): which timer-log entries fall due when, on disk.

Time-bucketed slot files: one file per second of deliver time, ``<hour>/<second>`` under
``data_dir/timerslots/``, each an append-only list of 16-byte ``(timer-log queue offset,
deliver ts)`` pairs in arrival order. The timer log itself is the ConsumeQueue of
``TIMER_TOPIC_XXXX`` queue 0 (tagsCode = deliver time, or a sentinel of
:mod:`~clepsydra_store.engine.index.entry_states` once handed over or cancelled); a slot pair is
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

import bisect
import os
import shutil
import struct
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_store.engine.log.segment import fsync_dir

SLOT_MS = 1000
"""Deliver times one slot file covers."""
HOUR_MS = 3_600_000
PAIR = struct.Struct("<qq")
"""(timer-log queue offset, deliver ts)."""
_OPEN_FILES = 64
"""Slot files kept open for appending (the seconds timers are being written to)."""
_CLOSING_FILES = 1024
"""Evicted slot files left open for the next flush to fsync and close; past this many the
writer fsyncs and closes one itself (DEC-timer-slot-evict)."""
NO_TIMER = -1

_CACHED_SLOTS = 4
"""Slots whose sorted pairs stay in memory between hand-overs."""
_MAX_Q = 1 << 62
_LISTED_HOURS = 2
"""Hour folders whose slot listing stays in memory (the hand-over walks the first one or two)."""
_CODES_STEP = 64
"""Most pairs whose codes are asked for at once past the ones a hand-over takes."""


@dataclass(slots=True)
class _Slot:
    """A slot's pairs read so far, as (deliver ts, queue offset), sorted."""

    read: int = 0
    """Bytes of the file read."""
    pairs: list[tuple[int, int]] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    start: int = 0
    """``pairs[:start]`` are stale (handed over, cancelled): skipped."""
    taken: int = 0
    """Where the leading pairs stale or taken by the last :meth:`TimerIndex.due` end."""
    whole: bool = False
    """Every pair of the file is read: nothing was added to the slot since (the file is
    written only by :meth:`TimerIndex.add`), so the next load opens no file."""


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
        self._closing: deque[int] = deque()
        """Evicted slot files' fds, fsync'd and closed by the next flush (:meth:`_evict`)."""
        self._floor = 0
        """Slots below this one are emptied and waiting to be unlinked: nothing is added
        to them (a late pair goes to the floor's slot)."""
        self._unlinks: list[int] = []
        """Emptied slots, unlinked after the next checkpoint."""
        self._proposed: list[int] = []
        self._taken: list[tuple[_Slot, int]] = []
        """(slot, position) of each slot the last :meth:`due` took pairs from: its pairs before
        that position are stale or taken, so stale for good once :meth:`confirm` says the
        hand-over of the taken ones is appended (their entries then carry the handed-over
        sentinel)."""
        self._cache: OrderedDict[int, _Slot] = OrderedDict()
        """The last slots read, sorted (LRU)."""
        self.next_due: int = NO_TIMER
        """A lower bound of the earliest pending deliver time (NO_TIMER: none known)."""
        self.known_next_due: int | None = None
        """:attr:`next_due` when it is known to bound every pending timer's time from below
        (NO_TIMER: there is none), else None: a confirmed :meth:`due` computed it and only
        :meth:`add` changed it since. Not so before the first (a restart: pairs on disk that
        no ``add`` saw) nor between a :meth:`due` and its :meth:`confirm` (taken pairs whose
        hand-over may fail). One attribute, so a reader without the lock sees it whole."""
        self._hours: list[int] | None = None
        """Hour folders, sorted (listed from disk once, then kept by :meth:`add`; those below
        the floor's hour dropped; None: not listed yet)."""
        self._listed: OrderedDict[int, list[int]] = OrderedDict()
        """hour -> its slot numbers with a file, sorted, for the last hours walked (LRU, kept
        by :meth:`add` and :meth:`unlink`): memory bounded by a few hours' slots, however far
        ahead timers are."""
        self._unlinked: list[int] = []
        """Slots :meth:`unlink` removed (the flush thread), dropped from :attr:`_listed` by the
        next writer that looks."""
        self.wake = threading.Event()
        """Set when a timer due before :attr:`next_due` is added (a waiting hand-over)."""

    # ---- paths -------------------------------------------------------------------------
    def _path(self, slot: int) -> Path:
        return self.directory / f"{slot * SLOT_MS // HOUR_MS:08d}" / f"{slot:012d}"

    def _known_hours(self) -> list[int]:
        """The hour folders from the floor's hour on, and the listings up to date (writer
        lock). DEC-timer-handover-gap: the hand-over listed the folders on every call (a dozen
        system calls a call in the steady state); now a folder is listed when first walked."""
        if self._hours is None:
            try:
                self._hours = sorted(int(h) for h in os.listdir(self.directory) if h.isdigit())
            except FileNotFoundError:
                self._hours = []
        hours = self._hours
        while self._unlinked:
            slot = self._unlinked.pop()
            listed = self._listed.get(slot * SLOT_MS // HOUR_MS)
            if listed is not None:
                i = bisect.bisect_left(listed, slot)
                if i < len(listed) and listed[i] == slot:
                    del listed[i]
        below = bisect.bisect_left(hours, self._floor * SLOT_MS // HOUR_MS)
        if below:  # nothing is added below the floor: those folders are empty or going
            del hours[:below]
        return hours

    def _hour_slots(self, hour: int) -> list[int]:
        listed = self._listed.pop(hour, None)
        if listed is None:
            try:
                names = os.listdir(self.directory / f"{hour:08d}")
            except FileNotFoundError:
                names = []
            listed = sorted(int(n) for n in names if n.isdigit())
        self._listed[hour] = listed
        if len(self._listed) > _LISTED_HOURS:
            self._listed.popitem(last=False)
        return listed

    def slots(self, first: int = 0) -> Iterator[int]:
        """Slot numbers with a file from ``first`` on, in time order (writer lock: nothing
        is added while they are walked)."""
        hours = self._known_hours()
        first_hour = first * SLOT_MS // HOUR_MS
        i = bisect.bisect_left(hours, first_hour)
        while i < len(hours):
            listed = self._hour_slots(hours[i])
            j = bisect.bisect_left(listed, first) if hours[i] == first_hour else 0
            while j < len(listed):
                yield listed[j]
                j += 1
            i += 1

    # ---- write (writer lock) --------------------------------------------------------------
    def add(self, queue_offset: int, deliver_ts: int) -> None:
        """A parked timer (live dispatch and re-dispatch alike)."""
        slot = max(deliver_ts // SLOT_MS, self._floor)
        fd = self._fds.get(slot)
        if fd is None:
            self._note(slot)
            path = self._path(slot)
            if not path.parent.is_dir():
                path.parent.mkdir(parents=True, exist_ok=True)
                fsync_dir(self.directory)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[slot] = fd
            if len(self._fds) > _OPEN_FILES:
                self._evict()
        else:
            self._fds.move_to_end(slot)
        os.write(fd, PAIR.pack(queue_offset, deliver_ts))
        self._dirty.add(slot)
        cached = self._cache.get(slot)
        if cached is not None:
            cached.whole = False
        if self.next_due == NO_TIMER or deliver_ts < self.next_due:
            self.next_due = deliver_ts
            if self.known_next_due is not None:
                self.known_next_due = deliver_ts
            self.wake.set()

    def _evict(self) -> None:
        """Close the least recently appended slot file: the next flush fsyncs and closes it
        (its pairs are durable before the checkpoint that covers them, as an open one's), so
        a timer for a 65th second costs an open, not an fsync, under the writer lock
        (DEC-timer-slot-evict). The writer never closes a file the flush may be fsyncing."""
        old, old_fd = self._fds.popitem(last=False)
        self._dirty.discard(old)
        if len(self._closing) < _CLOSING_FILES:
            self._closing.append(old_fd)
        else:
            os.fsync(old_fd)
            os.close(old_fd)

    def _note(self, slot: int) -> None:
        """A slot file is (perhaps newly) open for appending: in the known hours' lists."""
        hours = self._known_hours()
        hour = slot * SLOT_MS // HOUR_MS
        i = bisect.bisect_left(hours, hour)
        if i == len(hours) or hours[i] != hour:
            hours.insert(i, hour)
        listed = self._listed.get(hour)
        if listed is not None:
            j = bisect.bisect_left(listed, slot)
            if j == len(listed) or listed[j] != slot:
                listed.insert(j, slot)

    def read(self, slot: int) -> list[tuple[int, int]]:
        """The pairs of a slot as (queue offset, deliver ts), first of each queue offset only,
        earliest first."""
        cached = self._load(slot)
        return [(q, ts) for ts, q in cached.pairs[cached.start:]]

    def _load(self, slot: int) -> _Slot:
        """The slot's pairs, sorted; a slot read before has only its new bytes read (its
        file is append-only)."""
        cached = self._cache.pop(slot, None) or _Slot()
        self._cache[slot] = cached
        if len(self._cache) > _CACHED_SLOTS:
            self._cache.popitem(last=False)
        if cached.whole:  # unchanged: no open, seek, read, close (DEC-timer-handover-gap)
            return cached
        try:
            with open(self._path(slot), "rb") as f:
                f.seek(cached.read)
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        cached.whole = len(raw) % PAIR.size == 0
        raw = raw[:len(raw) - len(raw) % PAIR.size]
        if raw:
            cached.read += len(raw)
            seen = cached.seen
            new = []
            for q, ts in PAIR.iter_unpack(raw):
                if q not in seen:
                    seen.add(q)
                    new.append((ts, q))
            if new:
                cached.pairs = sorted(cached.pairs[cached.start:] + new)  # two sorted runs
                cached.start = 0
        return cached

    def due(self, now_ms: int, max_count: int, codes_of: CodesOf) -> list[tuple[int, int]]:
        """Up to ``max_count`` live pairs due at ``now_ms``, earliest first, and
        :attr:`next_due` brought up to date. Slots found emptied are proposed for unlinking:
        :meth:`confirm` (once the hand-over of the pairs is appended) retires them.

        Per call the cost is the slot bytes appended since the last call plus the pairs it
        returns: a slot's pairs are kept sorted in memory while it is near (the last few slots
        read: bounded by the timers of a few seconds, not by the pending ones), the prefix
        known to be stale is skipped, and the codes of the pairs are asked for a batch at a
        time, only as far as the pairs taken and the next live one (DEC-drain-splice-shapes: a
        backlog of 100k timers due in one second is not read again on every call)."""
        out: list[tuple[int, int]] = []
        prefix = True
        """Every slot so far is emptied (only a prefix of the slots is ever retired)."""
        self._proposed = []
        self._taken = []
        self.known_next_due = None
        self.next_due = NO_TIMER
        for slot in self.slots(self._floor):
            cached = self._load(slot)
            later = self._take(cached, now_ms, max_count - len(out), out, codes_of)
            if cached.taken > cached.start:
                self._taken.append((cached, cached.taken))
            if later is not None:
                self.next_due = later
            if prefix and later is None and (slot + 1) * SLOT_MS - 1 <= now_ms:
                self._proposed.append(slot)
            else:
                prefix = False
            if later is not None:  # (a full batch reads on to the next live pair)
                break
        return out

    @staticmethod
    def _take(cached: _Slot, now_ms: int, room: int, out: list[tuple[int, int]],
              codes_of: CodesOf) -> int | None:
        """Append up to ``room`` live pairs of a slot due at ``now_ms`` to ``out``; the deliver
        time of the first live pair after them (due or not), None when there is none. The
        leading stale pairs of the due ones are skipped for good (``cached.start``); where the
        leading pairs stale or taken end is left in ``cached.taken`` (:meth:`confirm`)."""
        pairs = cached.pairs
        last = bisect.bisect_right(pairs, (now_ms, _MAX_Q), cached.start)
        pos = taken = cached.start
        """Every due pair before ``taken`` was stale or is taken now."""
        leading = True
        """Every due pair looked at so far was stale."""
        later: int | None = None
        step = 1
        """Pairs past the due ones asked for at once: one, then doubling up to _CODES_STEP
        (DEC-timer-handover-gap: the next pair is nearly always live, and each code may be a
        read)."""
        while pos < len(pairs) and later is None:
            # due pairs: as many as may be taken (and one), no further; past them, the next
            # live pair is looked for a few at a time
            if pos < last:
                chunk = pairs[pos:min(last, pos + max(room + 1, _CODES_STEP))]
            else:
                chunk = pairs[pos:pos + step]
                step = min(2 * step, _CODES_STEP)
            codes = codes_of([q for _, q in chunk])
            for i, ((ts, q), code) in enumerate(zip(chunk, codes, strict=True)):
                if code != ts:  # handed over, cancelled, rescheduled: stale for good
                    if leading and pos + i < last:
                        cached.start = pos + i + 1
                elif ts > now_ms or room <= 0:
                    later = ts
                    break
                else:
                    leading = False
                    out.append((q, ts))
                    room -= 1
                if taken == pos + i and pos + i < last:
                    taken += 1
            pos += len(chunk)
        cached.taken = taken
        return later

    def confirm(self) -> None:
        """The hand-over of the pairs the last :meth:`due` took is appended (writer lock): those
        pairs are stale from now on, skipped without asking for their codes again
        (DEC-drain-splice-shapes: the next call asked for them once more, ~9 % of a timer
        drain), and the slots it found emptied are retired."""
        for cached, taken in self._taken:
            if taken > cached.start:
                cached.start = taken
        self._taken = []
        self.known_next_due = self.next_due
        for slot in self._proposed:
            self._floor = slot + 1
            self._unlinks.append(slot)
            fd = self._fds.pop(slot, None)
            if fd is not None:
                os.close(fd)
            self._dirty.discard(slot)
            self._cache.pop(slot, None)
        self._proposed = []

    # ---- durability (flush) -----------------------------------------------------------------
    def fsync(self) -> None:
        """fsync the slot files written since the last flush (the flush thread): the evicted
        ones first, then closed; then the open ones written to (a slot retired meanwhile is
        empty: its pairs are never read again)."""
        self._drain_closing()
        for slot in list(self._dirty):
            self._dirty.discard(slot)
            fd = self._fds.get(slot)
            if fd is not None:
                try:
                    os.fsync(fd)
                except OSError:
                    pass

    def _drain_closing(self) -> None:
        closing = self._closing
        while closing:
            fd = closing.popleft()  # (atomic: the writer appends meanwhile)
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.close(fd)

    def take_unlinks(self) -> list[int]:
        """Emptied slots to unlink once this flush's checkpoint is written (writer lock)."""
        taken, self._unlinks = self._unlinks, []
        return taken

    def unlink(self, slots: list[int]) -> None:
        for slot in slots:
            path = self._path(slot)
            path.unlink(missing_ok=True)
            self._unlinked.append(slot)
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
        self._cache.clear()
        self.next_due = NO_TIMER
        self.known_next_due = None
        self._hours = None
        self._listed.clear()
        self._unlinked = []

    def close(self) -> None:
        self._drain_closing()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._dirty.clear()
