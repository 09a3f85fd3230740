"""The store's machinery under MessageStore: opening and recovery (P3), the locked append with
synchronous dispatch, flushing (async interval or sync group commit) with checkpoints, and
housekeeping (group offsets, retention P4 with the carry-forward of undelivered scheduled
messages, the disk guard of issue 12.8)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.msgid import pack_host
from clepsydra_core.records import (
    MIN_END_MARKER,
    CommitLogRecord,
    offset_msg_id,
    pack_header,
)
from clepsydra_store.engine.carry_forward import CarryForward
from clepsydra_store.engine.checkpoint import Checkpoint
from clepsydra_store.engine.codec import Prepared
from clepsydra_store.engine.commitlog import AppendBatch, CommitLog
from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.disk_usage import (
    DiskGuard,
    DiskLevel,
    DiskProbe,
    quota_probe,
    volume_probe,
)
from clepsydra_store.engine.dispatch import Dispatcher, Mark
from clepsydra_store.engine.fences import Fences
from clepsydra_store.engine.group_offsets import GroupOffsets
from clepsydra_store.engine.group_settings import GroupSettingsRegistry
from clepsydra_store.engine.handover import Handover
from clepsydra_store.engine.prepare import Preparer
from clepsydra_store.engine.segment import Segment
from clepsydra_store.engine.timer_ops import TimerOps
from clepsydra_store.engine.topics import TopicRegistry
from clepsydra_store.engine.types import PutResult, PutStatus

logger = logging.getLogger(__name__)

_Placed = tuple[list[tuple[ConsumeQueue, int, bytes]], list[int], list[int],
                list[tuple[Mark, int, int]]]
"""(packed ConsumeQueue entries per queue, key hashes, their CommitLog offsets,
(mark, own queue offset, own entry code) of the records with a mark) of a placed batch."""

SYNC_FLUSH_TIMEOUT_S = 5.0
HOUSEKEEPING_INTERVAL_S = 1.0
RETENTION_INTERVAL_S = 60.0
_HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class StoreDirs:
    root: Path
    consumequeue_root: Path | None = None
    """The ConsumeQueue folder when it is not ``root/consumequeue`` (its own volume)."""

    @property
    def commitlog(self) -> Path:
        return self.root / naming.COMMITLOG_DIR

    @property
    def consumequeue(self) -> Path:
        if self.consumequeue_root is not None:
            return self.consumequeue_root
        return self.root / naming.CONSUMEQUEUE_DIR

    @property
    def index(self) -> Path:
        return self.root / naming.INDEX_DIR

    @property
    def config(self) -> Path:
        return self.root / naming.CONFIG_DIR

    @property
    def checkpoint(self) -> Path:
        return self.root / naming.CHECKPOINT_FILE


class StoreCore:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._levels = config.delay_levels
        self._dirs = dirs = StoreDirs(config.data_dir, config.consumequeue_dir)
        dirs.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        """The writer lock: appends, dispatch, hand-over and segment deletion."""
        self._flush_lock = threading.Lock()
        self._flush_cond = threading.Condition()
        self._stop = threading.Event()
        self._closed = False
        self._graveyard: list[Segment] = []
        self._counters: Counter[str] = Counter()
        self._store_host = pack_host(config.store_host, config.shard_id)
        self._msg_id_prefix = self._store_host.hex().upper()
        self._topics = TopicRegistry(dirs.config)
        self._groups = GroupOffsets(dirs.config)
        self._group_settings = GroupSettingsRegistry(dirs.config)
        self._commitlog = CommitLog(dirs.commitlog, config.segment_size_bytes)
        self._dispatcher = Dispatcher(dirs.consumequeue, dirs.index, config.cq_entries_per_file,
                                      self._levels,
                                      key_index_entries=config.key_index_entries_per_file)
        self._preparer = Preparer(config, self._topics, self._group_settings.get)
        self._handover = Handover(self._commitlog, self._dispatcher, self._topics,
                                    self._levels, config.segment_size_bytes)
        self._carry = CarryForward(self._commitlog, self._dispatcher, self._levels)
        self.fences = Fences()
        """The newest fencing token of each hand-over (DEC-scheduler-lease, engine/fences.py)."""
        self.timers = TimerOps(self._lock, self._commitlog, self._dispatcher, self._handover,
                               self._preparer, self._levels, self._append_locked,
                               self._append_copies,
                               self._acknowledge, self._copies_of,
                               config.timer_handover_gap_ms, fences=self.fences)
        """Timer messages (issue 15): hand-over, cancel, reschedule, backlog."""
        self.arrivals = self._dispatcher.arrivals
        """Pulls held until their queue has an append (issue 14, engine/arrivals.py)."""
        self._checkpoint_offset = -1
        self._force_checkpoint = False
        self._recover()
        self._disk = DiskGuard(self._disk_probe(), max_ratio=config.disk_max_ratio,
                               warn_ratio=config.disk_warn_ratio)
        self._disk.sample()
        self._threads = [
            threading.Thread(target=self._flush_loop, name="store-flush", daemon=True),
            threading.Thread(target=self._housekeeping_loop, name="store-housekeeping",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _copies_of(self, msg_id: str) -> list[CommitLogRecord]:
        """Every stored copy of a message (``MessageStore.get_by_msg_id``)."""
        raise NotImplementedError

    def _disk_probe(self) -> DiskProbe:
        dirs = self._dirs
        if self.config.disk_capacity_bytes > 0:
            return quota_probe([dirs.root, dirs.consumequeue], self.config.disk_capacity_bytes)
        return volume_probe(dirs.commitlog)

    # ---- recovery (SPEC P3) ----------------------------------------------------------------
    def _recover(self) -> None:
        cl, disp = self._commitlog, self._dispatcher
        known = {cfg.name for cfg in self._topics.all()} | {naming.SCHEDULE_TOPIC,
                                                            naming.TIMER_TOPIC}
        disp.replay_known = known
        disp.replay_since = {cfg.name: cfg.since for cfg in self._topics.all() if cfg.since}
        for topic in sorted(known):
            topic_dir = self._dirs.consumequeue / topic
            if topic_dir.is_dir():
                for entry in topic_dir.iterdir():
                    if entry.name.isdigit():
                        disp.queue(topic, int(entry.name))
        disp.key_index.load(cl.max_offset)
        ckpt = Checkpoint.load(self._dirs.checkpoint)
        missing = ckpt is not None and self._queues_missing(ckpt, known)
        trusted = ckpt is not None and not missing
        start = max(ckpt.commitlog_offset, cl.min_offset) if ckpt and trusted else cl.min_offset
        if ckpt is not None and trusted:
            disp.handed_over = dict(ckpt.handed_over)
        rebuild = disp.key_index.rebuild_from
        if rebuild is not None and rebuild < start:  # key index files damaged or missing
            start = max(rebuild, cl.min_offset)
        logger.info("store recovery data_dir=%s checkpoint_offset=%s redispatch_from=%d "
                    "rebuild=%s key_index_rebuild_from=%s", self._dirs.root,
                    ckpt and ckpt.commitlog_offset, start, missing, rebuild)
        end = cl.recover(start, start, disp.redispatch)
        if ckpt is not None and end < ckpt.commitlog_offset:
            self._rederive_marks(ckpt, end, dispatched=not trusted)
        elif ckpt is not None and not trusted:
            for level, mark in ckpt.handed_over.items():
                disp.raise_mark(level, mark)
        disp.finish_replay()
        disp.key_index.truncate_from(end)
        disp.key_index.drop_below(cl.min_offset)  # segments gone before the index files went
        for cq in list(disp.queues.values()):
            cq.truncate_from(end)
            cq.reset_min()
            cq.drop_below(cl.min_offset)
        for cfg in self._topics.all():
            total = sum(cq.max_offset for (t, _), cq in disp.queues.items() if t == cfg.name)
            self._preparer.seed_round_robin(cfg.name, total)
        logger.info("store recovered data_dir=%s commitlog_min_offset=%d commitlog_max_offset=%d "
                    "queues=%d", self._dirs.root, cl.min_offset, end, len(disp.queues))
        self.flush()

    def _rederive_marks(self, ckpt: Checkpoint, end: int, *, dispatched: bool) -> None:
        """The checkpoint is past the recovered end (a machine crash lost CommitLog bytes it
        had counted as flushed): its handed-over marks may name hand-over copies that are gone.
        Each level's mark is taken from the copies really present instead (their
        ``SCHEDULE_OFFSET``), so entries whose copies were lost are handed over again (SPEC D9,
        P3): the records from the first segment on are dispatched again, unless the recovery
        walk did that already (``dispatched``)."""
        disp = self._dispatcher
        logger.warning("checkpoint past the recovered commitlog end checkpoint_offset=%d "
                       "end_offset=%d: handed-over marks re-derived from the log",
                       ckpt.commitlog_offset, end)
        disp.finish_replay()  # the marks of the records walked so far
        if not dispatched:
            disp.handed_over = {}
            disp.states.clear()
            self._commitlog.replay(self._commitlog.min_offset, disp.redispatch)
            disp.finish_replay()
        for level, mark in sorted(ckpt.handed_over.items()):
            if disp.mark(level) < mark:
                logger.warning("handed-over mark stepped back level=%d checkpoint=%d log=%d",
                               level, mark, disp.mark(level))

    def _queues_missing(self, ckpt: Checkpoint, known: set[str]) -> bool:
        """A ConsumeQueue holds fewer entries than the checkpoint says it had (files lost)."""
        for topic, queues in ckpt.queues.items():
            if topic not in known:
                continue
            for queue_id, (low, high) in queues.items():
                cq = self._dispatcher.existing_queue(topic, queue_id)
                have_low, have_high = (cq.min_offset, cq.max_offset) if cq else (0, 0)
                if have_high < high or (high > low and (cq is None or have_low > low)):
                    logger.warning("consume queue missing entries topic=%s queue_id=%d "
                                   "checkpoint=[%d,%d) files=[%d,%d); rebuilding from the "
                                   "first commitlog segment", topic, queue_id, low, high,
                                   have_low, have_high)
                    return True
        return False

    # ---- append (caller holds the writer lock) ---------------------------------------------
    def _append_locked(self, items: Sequence[Prepared]) -> tuple[list[PutResult], int]:
        """Place, write (one write per segment) and dispatch ``items``; (results, end)."""
        results: list[PutResult] = []
        _, end = self._append_into(items, results)
        return results, end

    def _append_copies(self, items: Sequence[Prepared]) -> tuple[int, int]:
        """:meth:`_append_locked` of hand-over copies, whose callers read no ``PutResult``
        (their msgId is ``Prepared.uniq_key``, their store timestamp the batch's); (store
        timestamp, end). Issue 14: no offsetMsgId and no result built per message."""
        return self._append_into(items, None)

    def _append_into(self, items: Sequence[Prepared], results: list[PutResult] | None
                     ) -> tuple[int, int]:
        batch = self._commitlog.begin()
        now = time.time_ns() // 1_000_000
        try:
            placed = self._place(batch, items, now, results)
            end = batch.commit()
        except BaseException:
            batch.abort()
            raise
        entries, key_hashes, key_offsets, marks = placed
        self._dispatcher.dispatch(entries, key_hashes, key_offsets, marks)
        counters = self._counters
        counters["puts_total"] += len(items)
        counters["put_bytes_total"] += end - batch.start
        return now, end

    def _place(self, batch: AppendBatch, items: Sequence[Prepared], now: int,
               results: list[PutResult] | None) -> _Placed:
        """Place records (rolling to a new segment where one does not fit), their headers
        packed now that offsets and the store timestamp are known; each one's ``PutResult``
        added to ``results`` unless it is None."""
        pack = pack_header
        msg_id = offset_msg_id
        entry_pack = ENTRY.pack
        host = self._store_host
        prefix = self._msg_id_prefix
        queue = self._dispatcher.queue
        queues: dict[tuple[str, int], tuple[ConsumeQueue, list[bytes]]] = {}
        """(topic, queue id) -> (its ConsumeQueue, the packed entries of this batch)."""
        hashes: list[int] = []
        offsets: list[int] = []
        marks: list[tuple[Mark, int, int]] = []
        result = None if results is None else results.append
        new = tuple.__new__  # PutResult(...) without its Python-level __new__
        ok = PutStatus.OK
        parts = batch.parts  # cleared in place by a roll, never replaced
        append = parts.append
        position, segment_end = batch.position, batch.segment_end
        for (size, topic, queue_id, code, delay_ms, crc, flag, sys_flag, born_timestamp,
             born_host, reconsume_times, body_len, tail, key_hashes, mark, _, uniq) in items:
            if position + size + MIN_END_MARKER > segment_end:
                batch.position = position
                position = batch.place(size)
                segment_end = batch.segment_end
            pending = queues.get((topic, queue_id))
            if pending is None:
                pending = queues[topic, queue_id] = (queue(topic, queue_id), [])
            entries = pending[1]
            queue_offset = pending[0].next_offset + len(entries)
            if delay_ms:  # S2; a timer (issue 15): delay_ms < 0, its deliver time in code
                code = now + delay_ms if delay_ms > 0 else max(code, now)
            entries.append(entry_pack(position, size, code))
            append(pack(size, crc, queue_id, flag, queue_offset, position, sys_flag,
                        born_timestamp, born_host, now, host, reconsume_times, body_len))
            append(tail)
            if result is not None:
                offset_id = msg_id(prefix, position)
                result(new(PutResult, (ok, uniq or offset_id, topic, queue_id, queue_offset,
                                       position, now, size, offset_id)))
            for h in key_hashes:
                hashes.append(h)
                offsets.append(position)
            if mark is not None:
                marks.append((mark, queue_offset, code))
            position += size
        batch.position = position
        return ([(cq, cq.next_offset, b"".join(packed)) for cq, packed in queues.values()],
                hashes, offsets, marks)

    def _acknowledge(self, results: list[PutResult], end: int | None) -> list[PutResult]:
        """P2: with sync flush, wait (group commit) until ``end`` is fsync'd."""
        if end is None or self.config.flush != "sync" or self._wait_flushed(end):
            return results
        logger.warning("sync flush timed out end_offset=%d flushed_offset=%d", end,
                       self._commitlog.flushed_offset)
        return [r._replace(status=PutStatus.FLUSH_TIMEOUT) for r in results]

    def _wait_flushed(self, end: int) -> bool:
        deadline = time.monotonic() + SYNC_FLUSH_TIMEOUT_S
        with self._flush_cond:
            self._flush_cond.notify_all()
            while self._commitlog.flushed_offset < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return self._commitlog.flushed_offset >= end
                self._flush_cond.wait(remaining)
        return True

    # ---- flushing ----------------------------------------------------------------------------
    def flush(self) -> int:
        """fsync the CommitLog, ConsumeQueues and key index, then write the checkpoint;
        returns the checkpointed CommitLog offset."""
        with self._flush_lock:
            disp = self._dispatcher
            with self._lock:
                offset = self._commitlog.max_offset
                marks = dict(disp.handed_over)
                ranges = disp.ranges()
                states = disp.states.take()
                unlinks = disp.timers.take_unlinks()
            self._commitlog.flush()
            with self._flush_cond:
                self._flush_cond.notify_all()
            disp.states.apply(states)  # only records fsync'd above (issue 18 item 2)
            disp.flush()
            if offset != self._checkpoint_offset or self._force_checkpoint:
                self._force_checkpoint = False
                Checkpoint(offset, marks, ranges).save(self._dirs.checkpoint)
                self._checkpoint_offset = offset
            disp.timers.unlink(unlinks)
            return offset

    def _flush_loop(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        sync = self.config.flush == "sync"
        next_checkpoint = time.monotonic() + interval_s
        cl = self._commitlog
        while not self._stop.is_set():
            try:
                if sync:
                    with self._flush_cond:
                        while (not self._stop.is_set() and cl.max_offset <= cl.flushed_offset
                               and time.monotonic() < next_checkpoint):
                            self._flush_cond.wait(max(0.0, next_checkpoint - time.monotonic()))
                    cl.flush()
                    with self._flush_cond:
                        self._flush_cond.notify_all()
                else:
                    self._stop.wait(interval_s)
                if time.monotonic() >= next_checkpoint or not sync:
                    next_checkpoint = time.monotonic() + interval_s
                    self.flush()
            except Exception:
                logger.exception("flush failed data_dir=%s; retrying", self._dirs.root)
                self._stop.wait(interval_s)

    def _housekeeping_loop(self) -> None:
        next_retention = time.monotonic() + RETENTION_INTERVAL_S
        while not self._stop.wait(HOUSEKEEPING_INTERVAL_S):
            try:
                self._groups.persist()
                pressed = self._disk.sample() is not DiskLevel.OK
                if pressed or time.monotonic() >= next_retention:
                    # past the warning level, retention looks every second (12.8)
                    next_retention = time.monotonic() + RETENTION_INTERVAL_S
                    if self.delete_expired_segments() and pressed:
                        self._disk.sample()
            except Exception:
                logger.exception("housekeeping failed data_dir=%s; continuing", self._dirs.root)

    # ---- retention (SPEC P4) -----------------------------------------------------------------
    def delete_expired_segments(self, now_ms: int | None = None) -> int:
        """P4: delete whole segments older than retention (never the active one); undelivered
        scheduled messages in them are carried forward first (engine/carry_forward.py).
        Returns how many segments were deleted."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        cutoff = now - int(self.config.retention_hours * _HOUR_MS)
        cl = self._commitlog
        with self._flush_lock, self._lock:
            old, self._graveyard = self._graveyard, []
            for segment in old:
                segment.close()
            count = 0
            for segment in cl.segments[:-1]:
                if segment.mtime_ms() >= cutoff:
                    break
                count += 1
            removed = []
            if count:
                carried = self._carry.carry(cl.segments[count].start)
                self._counters["schedule_carried_total"] += carried.carried
                self._counters["schedule_carried_bytes_total"] += carried.carried_bytes
                self._counters["schedule_carry_unreadable_total"] += carried.unreadable
                removed = cl.remove_head(count)
            if removed:
                self._graveyard += removed
                self._graveyard += self._dispatcher.drop_below(cl.min_offset)
                self._force_checkpoint = True
                self._counters["segments_deleted_total"] += len(removed)
                logger.info("expired segments deleted count=%d first=%d new_min_offset=%d",
                            len(removed), removed[0].start, cl.min_offset)
        if removed:
            self.flush()
        return len(removed)

    # ---- disk guard (issue 12.8) -------------------------------------------------------------
    def check_disk(self) -> None:
        """DiskFull (507) while the disk is past its high-water mark."""
        self._disk.check()

    # ---- lifecycle -------------------------------------------------------------------------
    def release_waits(self) -> None:
        """The store stops: held pulls and the timers' waiting hand-over answer now, and no
        request waits again (the graceful stop, issue 14)."""
        self.arrivals.close()
        self.timers.release()

    def close(self) -> None:
        """Flush everything, write checkpoints, stop threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.release_waits()
        self._stop.set()
        with self._flush_cond:
            self._flush_cond.notify_all()
        for thread in self._threads:
            thread.join()
        self.flush()
        self._groups.persist()
        with self._lock:
            for segment in self._graveyard:
                segment.close()
            self._dispatcher.close()
            self._commitlog.close()
        logger.info("store closed data_dir=%s", self._dirs.root)

    def __enter__(self) -> StoreCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
