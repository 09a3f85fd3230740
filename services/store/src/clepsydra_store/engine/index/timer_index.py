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
loses the pairs of timers whose copies it lost.

A new pair is not written to its slot file at once (DEC-timer-pair-journal): :meth:`TimerIndex.add`
keeps it in memory, by slot, and each flush appends the pairs added since the last one to one
file, the pair journal (``data_dir/timerslots/journal``), fsync'd before the checkpoint that
covers their records. Once ``SPILL_PAIRS`` pairs (or ``SPILL_SLOTS`` slots) are held, a flush
renames the journal ``journal.spilling``, starts a new one, and a thread of its own spreads
those pairs into their slot files (an open and a write a slot, not a timer), makes them durable
with one ``syncfs`` and removes ``journal.spilling``. A hand-over reads a slot's file and its
pairs held in memory alike. Recovery reads the journal back (the pairs up to the checkpoint);
the re-dispatch of the CommitLog from the checkpoint adds the pairs of the parked records after
it again (``Dispatcher.redispatch``), as it rewrites ConsumeQueue entries. A store written
before the journal has slot files only: they read as they did.

Why slots and not a wheel: RocketMQ 5's wheel (RIP-43) holds one slot per tick of a fixed span
(3 days by default) and re-queues what lies beyond; a year at millisecond precision would need
a wheel of billions of slots or a hierarchy. Slot files named by time cover any span with
files only where timers are, their order is the directory listing's, and a second's file is
small enough to sort in memory when it falls due.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
import os
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_store.engine.log.segment import fsync_dir, pwrite_all

logger = logging.getLogger(__name__)

SLOT_MS = 1000
"""Deliver times one slot file covers."""
HOUR_MS = 3_600_000
PAIR = struct.Struct("<qq")
"""(timer-log queue offset, deliver ts)."""
SPILL_PAIRS = 65_536
"""Pairs held in memory (and in the journal) past which a flush spreads them into their slot
files (DEC-timer-pair-journal): 1 MiB of pairs, and the journal recovery reads back."""
SPILL_SLOTS = 16_384
"""Slots held in memory past which a flush spreads them (each holds a buffer of its own: the
memory of timers each due in a second of its own stays bounded, ~2-3 MiB)."""
JOURNAL_NAME = "journal"
SPILLING_NAME = "journal.spilling"
"""The journal of the pairs a spill is spreading into their slot files, until it is done."""
JOURNAL_HEADER = struct.Struct("<4sI")
"""The pair journal's header: magic, format version; then pairs (:data:`PAIR`)."""
JOURNAL_MAGIC = b"CTPJ"
JOURNAL_VERSION = 1
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
    """Every pair of the file is read: nothing was spread into the slot file since (it is
    written only by a spill, whose pairs were read from memory already), so the next load
    opens no file."""
    buf: bytearray | None = None
    """The slot's held pairs last merged (DEC-timer-pair-journal) ..."""
    buf_read: int = 0
    """... and how many bytes of them; the same of the pairs of a spill under way:"""
    spill_buf: bytearray | None = None
    spill_read: int = 0


CodesOf = Callable[[list[int]], list[int | None]]
"""Timer-log queue offsets -> their entries' tagsCodes now (None: no such entry)."""


class TimerIndex:
    """The slot files. Writers hold the store's writer lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._held: dict[int, bytearray] = {}
        """slot -> its pairs added since the last spill, not yet in its file
        (DEC-timer-pair-journal)."""
        self._held_pairs = 0
        self._spilling: dict[int, bytearray] = {}
        """The pairs a flush is spreading into their slot files (read like :attr:`_held`)."""
        self._journal_buf = bytearray()
        """Pairs added since the last flush took them for the journal."""
        self._spiller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._journal_fd = self._open_journal()
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
        self.spills = 0
        """Spills done (DEC-timer-pair-journal)."""

    # ---- paths -------------------------------------------------------------------------
    def _path(self, slot: int) -> Path:
        return self.directory / f"{slot * SLOT_MS // HOUR_MS:08d}" / f"{slot:012d}"

    def _known_hours(self) -> list[int]:
        """The hour folders from the floor's hour on, and the listings up to date (writer
        lock). DEC-timer-handover-gap: the hand-over listed the folders on every call (a dozen
        system calls a call in the steady state); now a folder is listed when first walked."""
        if self._hours is None:
            in_memory = (self._spilling, self._held)  # before the listing: a spill may end
            try:
                found = {int(h) for h in os.listdir(self.directory) if h.isdigit()}
            except FileNotFoundError:
                found = set()
            for held in in_memory:  # hours with pairs in memory only
                found.update(slot * SLOT_MS // HOUR_MS for slot in held)
            self._hours = sorted(found)
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
            in_memory = (self._spilling, self._held)  # before the listing: a spill may end
            try:
                names = os.listdir(self.directory / f"{hour:08d}")
            except FileNotFoundError:
                names = []
            on_disk = {int(n) for n in names if n.isdigit()}
            for held in in_memory:  # slots with pairs in memory only
                on_disk.update(slot for slot in held if slot * SLOT_MS // HOUR_MS == hour)
            listed = sorted(on_disk)
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
        pair = PAIR.pack(queue_offset, deliver_ts)
        held = self._held.get(slot)
        if held is None:
            self._note(slot)
            self._held[slot] = bytearray(pair)
        else:
            held += pair
        self._held_pairs += 1
        self._journal_buf += pair
        if self.next_due == NO_TIMER or deliver_ts < self.next_due:
            self.next_due = deliver_ts
            if self.known_next_due is not None:
                self.known_next_due = deliver_ts
            self.wake.set()

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
        new: list[tuple[int, int]] = []
        seen = cached.seen
        in_memory = (self._spilling.get(slot), self._held.get(slot))
        """Taken before the file is read: a spill (the flush thread) that ends meanwhile wrote
        them to the file after the read, and no longer holds them after."""
        if not cached.whole:  # unchanged: no open, seek, read, close (DEC-timer-handover-gap)
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
                self._merge(raw, seen, new)
        spilling, held = in_memory
        # the pairs not in the file yet (DEC-timer-pair-journal): only the bytes added since
        # the last load (a spill's buffer is the held one of before)
        if spilling is not None:
            start = (cached.buf_read if spilling is cached.buf
                     else cached.spill_read if spilling is cached.spill_buf else 0)
            end = len(spilling)
            if end > start:
                self._merge(bytes(spilling[start:end]), seen, new)
            cached.spill_buf, cached.spill_read = spilling, end
        if held is not None:
            start = cached.buf_read if held is cached.buf else 0
            end = len(held)
            if end > start:
                self._merge(bytes(held[start:end]), seen, new)
            cached.buf, cached.buf_read = held, end
        if new:
            cached.pairs = sorted(cached.pairs[cached.start:] + new)  # two sorted runs
            cached.start = 0
        return cached

    @staticmethod
    def _merge(raw: bytes, seen: set[int], new: list[tuple[int, int]]) -> None:
        for q, ts in PAIR.iter_unpack(raw):
            if q not in seen:
                seen.add(q)
                new.append((ts, q))

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

    def upcoming(self, after: tuple[int, int], until_ms: int, max_count: int,
                 codes_of: CodesOf) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
        """Up to ``max_count`` live pairs (queue offset, deliver ts) after the pair ``after``
        (deliver ts, queue offset) and due by ``until_ms``, earliest first, and the last pair
        looked at (None: none): the timers a hand-over will take next, read without taking
        them (DEC-timer-staging; nothing here changes what :meth:`due` returns)."""
        out: list[tuple[int, int]] = []
        last: tuple[int, int] | None = None
        for slot in self.slots(max(self._floor, after[0] // SLOT_MS)):
            if slot * SLOT_MS > until_ms or len(out) >= max_count:
                break
            cached = self._load(slot)
            pairs = cached.pairs
            i = bisect.bisect_right(pairs, after, cached.start)
            j = bisect.bisect_right(pairs, (until_ms, _MAX_Q), i)
            while i < j and len(out) < max_count:
                chunk = pairs[i:min(j, i + max_count - len(out))]
                codes = codes_of([q for _, q in chunk])
                out += [(q, ts) for (ts, q), code in zip(chunk, codes, strict=True)
                        if code == ts]
                last = chunk[-1]
                i += len(chunk)
        return out, last

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
            held = self._held.pop(slot, None)  # stale: the journal may keep them (read stale)
            if held is not None:
                self._held_pairs -= len(held) // PAIR.size
            self._cache.pop(slot, None)
        self._proposed = []

    # ---- durability (flush) -----------------------------------------------------------------
    def _open_journal(self) -> int:
        """Open the pair journal (created with its header when absent) and hold the pairs it
        has (a restart: those of records up to the checkpoint, DEC-timer-pair-journal), with
        those of a spill the restart cut short (``journal.spilling``, appended to it first)."""
        path = self.directory / JOURNAL_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            body = _read_journal(fd, path, create=True)
            spilling = self.directory / SPILLING_NAME
            if spilling.exists():
                old_fd = os.open(spilling, os.O_RDWR)
                try:
                    old = _read_journal(old_fd, spilling, create=False)
                finally:
                    os.close(old_fd)
                pwrite_all(fd, old, JOURNAL_HEADER.size + len(body), "timer pair journal")
                os.fsync(fd)
                spilling.unlink()
                fsync_dir(self.directory)
                body += old
        except BaseException:
            os.close(fd)
            raise
        for q, ts in PAIR.iter_unpack(body):
            slot = ts // SLOT_MS
            held = self._held.get(slot)
            if held is None:
                self._held[slot] = held = bytearray()
            held += PAIR.pack(q, ts)
            self._held_pairs += 1
        return fd

    def take(self) -> TimerPoint:
        """What this flush makes durable (writer lock, with the CommitLog offset it
        checkpoints): the pairs added since the last flush, for the journal; and, once
        ``SPILL_PAIRS`` (or ``SPILL_SLOTS`` slots) are held and no spill is under way, every
        held pair, to spread into the slot files."""
        point = TimerPoint(bytes(self._journal_buf))
        self._journal_buf = bytearray()
        if (self._held_pairs >= SPILL_PAIRS or len(self._held) >= SPILL_SLOTS) \
                and not self._spilling:
            point.spill = self._spilling = self._held
            self._held = {}
            self._held_pairs = 0
        return point

    def make_durable(self, point: TimerPoint) -> None:
        """Before the checkpoint (the flush thread): the point's pairs appended to the journal
        and fsync'd (one write, one fsync a flush). With a spill, the journal then holds exactly
        its pairs (it took every pair held when the point was taken): it is renamed
        ``journal.spilling``, a new journal begins, and a thread of its own spreads the pairs
        into their slot files, makes them durable and removes ``journal.spilling`` (the flush
        does not wait for the slot files: DEC-timer-pair-journal)."""
        if point.journal:
            os.lseek(self._journal_fd, 0, os.SEEK_END)
            view = memoryview(point.journal)
            while view:
                view = view[os.write(self._journal_fd, view):]
            os.fsync(self._journal_fd)
        if point.spill is None:
            return
        os.close(self._journal_fd)
        self._journal_fd = -1
        path = self.directory / JOURNAL_NAME
        os.replace(path, self.directory / SPILLING_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _read_journal(fd, path, create=True)  # its header, fsync'd, and the name
        self._journal_fd = fd
        spiller = threading.Thread(target=self._spill_then_drop, args=(point.spill,),
                                   name="store-timer-spill", daemon=True)
        self._spiller = spiller
        spiller.start()

    def _spill_then_drop(self, spill: dict[int, bytearray]) -> None:
        """The spill thread: the pairs into their slot files, then ``journal.spilling`` gone
        and the pairs no longer held (a failure is retried: they stay held meanwhile)."""
        while True:
            try:
                self._spill(spill)
                (self.directory / SPILLING_NAME).unlink(missing_ok=True)
                fsync_dir(self.directory)
                break
            except OSError:
                logger.exception("timer slot spill failed dir=%s; retrying", self.directory)
                if self._stopping.wait(1.0):
                    return
        self._spilling = {}
        self.spills += 1

    def wait_spill(self) -> None:
        """Wait for the spill under way, if any (close, tests)."""
        spiller = self._spiller
        if spiller is not None:
            spiller.join()
            self._spiller = None

    def _spill(self, spill: dict[int, bytearray]) -> None:
        """Append each slot's pairs to its file (an open a slot), then make them durable: one
        ``syncfs`` of the store's filesystem, else an fsync a file (DEC-timer-pair-journal).
        Slots retired meanwhile are skipped (their pairs are stale)."""
        floor = self._floor
        written: list[int] = []
        syncfs = _syncfs_available()
        try:
            for slot in sorted(spill):
                if slot < floor:
                    continue
                path = self._path(slot)
                if not path.parent.is_dir():
                    path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                written.append(fd)
                view = memoryview(spill[slot])
                while view:
                    view = view[os.write(fd, view):]
                if not syncfs:
                    os.fsync(fd)
                os.close(written.pop())
            if syncfs:
                _syncfs(self.directory)
            else:
                for hour in {self._path(slot).parent for slot in spill if slot >= floor}:
                    fsync_dir(hour)
                fsync_dir(self.directory)
        finally:
            for fd in written:
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
        self._stopping.clear()
        self._journal_fd = self._open_journal()
        self._floor = 0
        self._unlinks = []
        self._cache.clear()
        self.next_due = NO_TIMER
        self.known_next_due = None
        self._hours = None
        self._listed.clear()
        self._unlinked = []

    def close(self) -> None:
        """Wait for a spill under way; close the journal (the store's last flush wrote what it
        must keep)."""
        self._stopping.set()  # (a spill failing and retrying gives up: its journal stays)
        self.wait_spill()
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1
        self._held.clear()
        self._held_pairs = 0
        self._spilling = {}
        self._journal_buf = bytearray()


def _read_journal(fd: int, path: Path, *, create: bool) -> bytes:
    """The pairs of a journal file (``fd`` open read-write): its header checked (one of a
    format this store does not know is refused, not read wrong), a torn tail cut (a flush cut
    short: no checkpoint covers it); ``create``: a file without a whole header gets one."""
    raw = b""
    if os.fstat(fd).st_size >= JOURNAL_HEADER.size:
        with open(path, "rb") as f:
            raw = f.read()
        magic, version = JOURNAL_HEADER.unpack_from(raw)
        if magic != JOURNAL_MAGIC or version != JOURNAL_VERSION:
            raise ValueError(f"timer pair journal {path}: format {magic!r} v{version} unknown "
                             f"(this store reads {JOURNAL_MAGIC!r} v{JOURNAL_VERSION})")
    elif create:  # new, or torn before its header was whole: no pair was in it
        os.ftruncate(fd, 0)
        pwrite_all(fd, JOURNAL_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION), 0,
                   "timer pair journal")
        os.fsync(fd)
        fsync_dir(path.parent)
        return b""
    body = raw[JOURNAL_HEADER.size:]
    whole = len(body) - len(body) % PAIR.size
    if whole != len(body):
        os.ftruncate(fd, JOURNAL_HEADER.size + whole)
    return body[:whole]


@dataclass(slots=True)
class TimerPoint:
    """The timer index's part of a flush (:meth:`TimerIndex.take`)."""

    journal: bytes
    """Pairs for the journal."""
    spill: dict[int, bytearray] | None = None
    """slot -> pairs to spread into the slot files, or None."""


_LIBC: ctypes.CDLL | None = None


def _syncfs_available() -> bool:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return False
    return hasattr(_LIBC, "syncfs")


def _syncfs(directory: Path) -> None:
    """``syncfs(2)`` of the filesystem holding ``directory``: every written file and name on it
    durable in one call (Linux, :func:`_syncfs_available`)."""
    assert _LIBC is not None
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _LIBC.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {directory}: {os.strerror(err)}")
    finally:
        os.close(fd)
