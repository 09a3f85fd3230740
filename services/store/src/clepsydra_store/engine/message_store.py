"""MessageStore: the engine's one entry point, composed of its parts (no inheritance, no
callbacks up): the log (``log/``: CommitLog, checkpoint, group commit, disk guard), the indexes
and their dispatcher (``index/``), the write path (``write/``: routing, encoder, writer), the
hand-over, timers and retention (``schedule/``) and the metadata (``meta/``). Each part is
given the parts below it when it is made; the API layer (``api/``) calls only this facade.

Thread-safe: one writer lock serialises appends (validation and encoding happen before it);
reads run concurrently. Dispatch is synchronous inside the append. Recovery (P3) runs in the
constructor; background threads flush (async: every flush_interval_ms; sync: group commit, P2)
and keep house (group offsets and the disk guard each second, retention each minute, P4; every
second while the disk is past its warning level).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, overload

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    ClepsydraError,
    Forbidden,
    MessageNotFound,
    OffsetOutOfRange,
    TopicNotFound,
)
from clepsydra_core.errors import ValidationError as _ValidationError
from clepsydra_core.groups import GroupSettings, validate_settings
from clepsydra_core.records import CommitLogRecord, tags_code
from clepsydra_core.validation import check_consumable, validate_group_name, validate_topic_name
from clepsydra_store.engine.config import EngineConfig, StoreDirs
from clepsydra_store.engine.index import lookup
from clepsydra_store.engine.index.arrivals import held_read, nothing_yet
from clepsydra_store.engine.index.consume_queue import ENTRY
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.lookup import Copies, Lookup
from clepsydra_store.engine.index.recovery import recover
from clepsydra_store.engine.log.commitlog import CommitLog
from clepsydra_store.engine.log.disk_usage import DiskGuard, DiskLevel, quota_probe, volume_probe
from clepsydra_store.engine.log.flush import Flusher, GroupCommit
from clepsydra_store.engine.meta.group_offsets import GroupOffsets
from clepsydra_store.engine.meta.group_settings import GroupSettingsRegistry
from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.schedule.carry_forward import CarryForward, Retention
from clepsydra_store.engine.schedule.drain import Drain
from clepsydra_store.engine.schedule.fences import Fences
from clepsydra_store.engine.schedule.handover import Handover
from clepsydra_store.engine.schedule.staging import Staging
from clepsydra_store.engine.schedule.timers import Timers
from clepsydra_store.engine.types import (
    RECORDS,
    CopyRequest,
    HandoverResult,
    Item,
    LevelEntries,
    Outcome,
    ParkedState,
    PutRequest,
    PutResult,
    QueueInfo,
    QueueRead,
    RangeCopyRequest,
    RangeCopyResult,
    RecordReader,
    SkippedCopy,
    TimerBacklog,
    TimerHandoverResult,
    TopicInfo,
)
from clepsydra_store.engine.write.codec import Prepared
from clepsydra_store.engine.write.encoder import BatchEncoder
from clepsydra_store.engine.write.preparer import Preparer
from clepsydra_store.engine.write.writer import Writer

logger = logging.getLogger(__name__)

MAX_COPIES = lookup.MAX_COPIES
"""A look-up by msgId returns at most this many copies (the newest)."""
MAX_PULL_SCAN_FACTOR = 16
"""A tag-filtered pull scans at most this many entries per message asked for."""
HOUSEKEEPING_INTERVAL_S = 1.0
RETENTION_INTERVAL_S = 60.0


class TopicBusy(ClepsydraError):
    """A topic cannot shrink: a queue it would hide still holds unconsumed messages (A1)."""

    code = "TOPIC_NOT_DRAINED"
    http_status = 409


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore:
    def __init__(self, config: EngineConfig) -> None:
        """Recover (P3) from config.data_dir and start background threads (flush, retention)."""
        self.config = config
        levels = self._levels = config.delay_levels
        dirs = self._dirs = StoreDirs.of(config)
        dirs.root.mkdir(parents=True, exist_ok=True)
        self._counters: Counter[str] = Counter()
        self._stop = threading.Event()
        self._closed = False
        self._topics = TopicRegistry(dirs.config)
        self._groups = GroupOffsets(dirs.config)
        self._group_settings = GroupSettingsRegistry(dirs.config)
        cl = self._commitlog = CommitLog(dirs.commitlog, config.segment_size_bytes)
        disp = self._dispatcher = Dispatcher(
            dirs.consumequeue, dirs.index, config.cq_entries_per_file, levels,
            key_index_entries=config.key_index_entries_per_file)
        self._group_commit = GroupCommit(cl)
        writer = self._writer = Writer(cl, disp, config.store_host,
                                       sync_flush=config.flush == "sync",
                                       group_commit=self._group_commit, counters=self._counters,
                                       shard_id=config.shard_id)
        self._preparer = Preparer(config, self._topics, self._group_settings)
        self._lookup = Lookup(cl, disp.key_index)
        self._drain = Drain(cl, self._topics, config.segment_size_bytes)
        self._fences = Fences()
        """The newest fencing token of each hand-over (DEC-scheduler-lease,
        schedule/fences.py)."""
        self._handover = Handover(writer, disp, self._drain, levels, self._counters,
                                  self._fences, Staging(config.timer_stage_ahead_ms,
                                                        self._topics))
        self._timers = Timers(writer, disp, self._handover, self._preparer, levels, self._lookup,
                             config.timer_handover_gap_ms)
        """Timer messages (T1, T2): hand-over, cancel, reschedule, backlog."""
        self._arrivals = disp.arrivals
        """Pulls held until their queue has an append (index/arrivals.py)."""
        self._retention = Retention(cl, disp, CarryForward(cl, disp, levels), writer.lock,
                                    config.retention_hours, self._counters)
        self._flusher = Flusher(cl, disp, writer.lock, dirs.checkpoint, self._group_commit,
                                interval_ms=config.flush_interval_ms,
                                sync=config.flush == "sync")
        end = recover(cl, disp, self._topics.all(), dirs.consumequeue, dirs.checkpoint)
        for cfg in self._topics.all():  # the round robin goes on where it was
            total = sum(cq.max_offset for (t, _), cq in disp.queues.items() if t == cfg.name)
            self._preparer.seed_round_robin(cfg.name, total)
        logger.info("store opened data_dir=%s commitlog_max_offset=%d", dirs.root, end)
        self.flush()
        probe = (quota_probe([dirs.root, dirs.consumequeue], config.disk_capacity_bytes)
                 if config.disk_capacity_bytes > 0 else volume_probe(dirs.commitlog))
        self._disk = DiskGuard(probe, max_ratio=config.disk_max_ratio,
                               warn_ratio=config.disk_warn_ratio)
        self._disk.sample()
        self._threads = [
            threading.Thread(target=self._flusher.run, args=(self._stop,), name="store-flush",
                             daemon=True),
            threading.Thread(target=self._housekeeping_loop, name="store-housekeeping",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # ---- topics ----------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int, *,
                     system: bool = False) -> tuple[TopicInfo, bool]:
        """(info, created). Same queue count again -> created False. A different count ->
        ValidationError. ``system`` False refuses system names (Forbidden, S3)."""
        validate_topic_name(name)
        if not system and naming.is_system_topic(name):
            raise Forbidden(f"topic {name!r} is a system topic", rule="S3")
        if name == naming.SCHEDULE_TOPIC:
            raise Forbidden(f"{name} exists implicitly", rule="S3")
        if not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise _ValidationError(f"queues must be 1..1024, got {queues!r}",
                                   code="INVALID_REQUEST")
        # records of an earlier topic of this name (deleted) stay out of this one (A2)
        cfg, created = self._topics.create(name, queues, system, self._commitlog.max_offset)
        if cfg.queues != queues:
            raise _ValidationError(f"topic {name} exists with {cfg.queues} queues, not {queues}",
                                   code="TOPIC_EXISTS")
        if created and not system:  # a consumer of a deleted namesake may have committed
            self._groups.forget_topic(name)
        if created:
            logger.info("topic created topic=%s queues=%d system=%s", name, queues, system)
        return self.get_topic(name), created

    def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Change a topic's queue count (A1). Growing adds empty queues. Shrinking hides the
        queues from ``queues`` on from producers and consumers, and is refused (TopicBusy)
        while one of them holds a message that a group with progress on the topic has not
        consumed, or any message when no group has; their files stay, so growing again shows
        them with their offsets. System topics are refused (Forbidden, S3)."""
        validate_topic_name(name)
        if naming.is_system_topic(name):
            raise Forbidden(f"cannot change system topic {name!r}: the store keeps its queues",
                            rule="S3")
        if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise _ValidationError(f"queues must be 1..1024, got {queues!r}",
                                   code="INVALID_REQUEST")
        with self._writer.lock:  # no append lands in a queue between the check and the change
            cfg = self._topics.get(name)
            if cfg is None:
                raise TopicNotFound(f"topic {name} does not exist")
            if queues < cfg.queues:
                self._check_drained(name, queues, cfg.queues)
            self._topics.set_queues(name, queues)
        if queues != cfg.queues:
            logger.info("topic updated topic=%s queues=%d previous=%d", name, queues, cfg.queues)
        return self.get_topic(name)

    def _check_drained(self, name: str, keep: int, queues: int) -> None:
        progress = self._groups.topic_offsets(name)
        for queue_id in range(keep, queues):
            cq = self._dispatcher.existing_queue(name, queue_id)
            if cq is None or cq.max_offset <= cq.min_offset:
                continue
            behind = {g: max(o.get(queue_id, cq.min_offset), cq.min_offset)
                      for g, o in progress.items()}
            behind = {g: o for g, o in behind.items() if o < cq.max_offset}
            if not progress or behind:
                who = (", ".join(f"{g} at {o}" for g, o in sorted(behind.items()))
                       if behind else "no group has consumed them")
                raise TopicBusy(
                    f"cannot shrink topic {name} to {keep} queues: queue {queue_id} holds "
                    f"messages up to offset {cq.max_offset} not yet consumed ({who}); let the "
                    f"consumers finish, or move a group past them with PUT "
                    f"/v1/groups/{{group}}/offsets, then try again", rule="A1")

    def delete_topic(self, name: str) -> bool:
        """Remove a topic (A2): its ConsumeQueue files and every group's progress on it go;
        its CommitLog records stay until retention (found by msgId, never in a topic of the
        same name created later). Scheduled messages aimed at it are parked on delivery (D7).
        System topics are refused (Forbidden, S3); False when there is no such topic."""
        if naming.is_system_topic(name):
            raise Forbidden(f"cannot delete system topic {name!r}: {naming.SCHEDULE_TOPIC}, "
                            f"{naming.RETRY_PREFIX}<group>, {naming.DLQ_PREFIX}<group> and the "
                            f"store's other system topics are its own", rule="S3")
        with self._writer.lock:
            self._flusher.force()
            if not self._topics.delete(name):
                return False
            for cq in self._dispatcher.remove_topic(name):
                cq.close()
            shutil.rmtree(self._dirs.consumequeue / name, ignore_errors=True)
            self._dispatcher.replay_known.discard(name)
        groups = self._groups.forget_topic(name)
        logger.info("topic deleted topic=%s groups_progress_dropped=%s", name,
                    ",".join(groups) or "-")
        return True

    def get_topic(self, name: str) -> TopicInfo:
        """TopicNotFound if absent. Includes SCHEDULE_TOPIC_XXXX (one queue per level)."""
        if name == naming.SCHEDULE_TOPIC:
            return self._topic_info(name, self._schedule_queue_count(), True)
        cfg = self._topics.get(name)
        if cfg is None:
            raise TopicNotFound(f"topic {name} does not exist")
        return self._topic_info(name, cfg.queues, cfg.system or naming.is_system_topic(name))

    def list_topics(self) -> list[TopicInfo]:
        infos = [self.get_topic(cfg.name) for cfg in self._topics.all()]
        infos.append(self.get_topic(naming.SCHEDULE_TOPIC))
        return sorted(infos, key=lambda t: t.name)

    def _schedule_queue_count(self) -> int:
        existing = [q for (t, q) in list(self._dispatcher.queues) if t == naming.SCHEDULE_TOPIC]
        return max([self._levels.max_level, *(q + 1 for q in existing)])

    def _topic_info(self, name: str, queues: int, system: bool) -> TopicInfo:
        infos = []
        for queue_id in range(queues):
            cq = self._dispatcher.existing_queue(name, queue_id)
            low, high = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
            infos.append(QueueInfo(queue_id, low, high))
        return TopicInfo(name, tuple(infos), system)

    # ---- produce -----------------------------------------------------------------------------
    def put(self, request: PutRequest) -> PutResult:
        """Validate, then append one message (P1, L2, S1, S2, R10, P2). Raises ValidationError /
        TopicNotFound / NoPermission / Forbidden with nothing stored."""
        return self.put_batch([request])[0]

    def put_batch(self, requests: list[PutRequest]) -> list[PutResult]:
        """All validated first; one bad message refuses the whole batch, nothing stored.
        Appended with one write (and one fsync with sync flush)."""
        ensure: dict[str, int] = {}
        items = BatchEncoder(self._preparer, ensure, _now_ms()).prepare(requests)
        return self._store(items, ensure)

    def put_group(self, requests: Sequence[PutRequest]) -> list[PutResult | Exception]:
        """Several producers' single messages (the poller's group, DEC-poller-group-append):
        each checked on its own, as :meth:`put` checks it (a refused one gets its own error,
        nothing of it stored, and refuses none of the others); the others appended as one
        batch: one writer lock, one write, one dispatch (with sync flush one fsync wait), in
        the order given. Each one's outcome in order: its result, or what refused it (what
        refuses the append itself, a full disk or a failed write, is every one's)."""
        now = _now_ms()
        outcomes: list[Any] = [None] * len(requests)
        items: list[Prepared] = []
        ensure: dict[str, int] = {}
        taken: list[int] = []
        """The index in ``outcomes`` of each item."""
        encoder = BatchEncoder(self._preparer, ensure, now)
        for i, request in enumerate(requests):
            own: dict[str, int] = {}  # a refused one creates no topic
            try:
                prepared = encoder.prepare_alone(request, own)
            except Exception as exc:  # what put() would raise: this one's answer only
                outcomes[i] = exc
                continue
            ensure.update(own)
            taken += (i,) * len(prepared)
            items += prepared
        if items:
            try:
                results: Sequence[PutResult | Exception] = self._store(items, ensure)
            except Exception as exc:
                results = (exc,) * len(items)
            for index, result in zip(taken, results, strict=True):
                outcomes[index] = result
        return outcomes

    def copy(self, requests: list[CopyRequest]) -> list[PutResult]:
        """Internal: copy stored messages into other topics (retry, DLQ, resend); topics other
        than ordinary ones (%RETRY%, %DLQ%) are created with 1 queue when missing."""
        ensure: dict[str, int] = {}
        items = []
        for req in requests:
            try:
                record = self._commitlog.read_record(req.commitlog_offset)
            except MessageNotFound as exc:
                raise MessageNotFound(f"no message at commitlog offset "
                                      f"{req.commitlog_offset}") from exc
            items.append(self._preparer.copy(req, record, ensure))
        return self._store(items, ensure)

    def copy_range(self, req: RangeCopyRequest) -> RangeCopyResult:
        """Internal: copy a range of a queue (see :class:`RangeCopyRequest`); all checked
        before any is written, appended with one write."""
        read = self.read_queue(req.topic, req.queue_id, req.from_offset, req.max_count)
        ensure: dict[str, int] = {}
        items: list[Prepared] = []
        copied: list[str] = []
        skipped: list[SkippedCopy] = []
        for record in read.messages:
            target = req.target_topic
            if target is None:
                target = record.properties.get(P.RETRY_TOPIC, "")
                why = self._origin_problem(target)
                if why is not None:
                    skipped.append(SkippedCopy(record.queue_offset, record.offset_msg_id, why))
                    continue
            items.append(self._preparer.copy(CopyRequest(
                commitlog_offset=record.commitlog_offset, topic=target,
                delay_level=req.delay_level, reconsume_times=req.reconsume_times,
                remove_properties=req.remove_properties,
                append_properties=req.append_properties), record, ensure))
            copied.append(record.offset_msg_id)
        last = read.messages[-1].commitlog_offset if read.messages else None
        return RangeCopyResult(len(copied), copied, skipped, read.next_offset, last,
                               results=self._store(items, ensure))

    def _origin_problem(self, origin: str) -> str | None:
        """Why a message cannot go back to its original topic (R16), or None."""
        if not origin:
            return "it has no RETRY_TOPIC (resend it into the retry topic instead)"
        if naming.is_system_topic(origin):
            return f"its original topic {origin!r} is a system topic"
        if self._topics.get(origin) is None:
            return f"its original topic {origin!r} does not exist in the store"
        return None

    def _store(self, items: list[Prepared], ensure: dict[str, int]) -> list[PutResult]:
        """Append a client's messages (produce, copies): refused whole while the disk is past
        its high-water mark (DiskFull, 12.8), before anything is written."""
        self.check_disk()
        for topic, queues in ensure.items():
            _, created = self._topics.create(topic, queues, True)
            if created:
                logger.info("topic auto-created topic=%s queues=%d", topic, queues)
        if not items:
            return []
        return self._writer.store(items)

    # ---- read --------------------------------------------------------------------------------
    @overload
    def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   tags: frozenset[str] | None = None) -> QueueRead[CommitLogRecord]: ...

    @overload
    def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   tags: frozenset[str] | None, reader: RecordReader[Item]) -> QueueRead[Item]: ...

    def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   tags: frozenset[str] | None = None,
                   reader: RecordReader[Any] = RECORDS) -> QueueRead[Any]:
        """Pull from a queue (C3 tag filter by hash then by string). queue_offset below min
        reads from min; above max -> OffsetOutOfRange; bad queue_id -> OffsetOutOfRange.
        The schedule topic is refused (Forbidden, S3). Each message as ``reader`` decodes it
        (the record, or a pull's JSON view: DEC-pull-json-view)."""
        check_consumable(topic)
        info_queues = self.get_topic(topic).queues
        if not 0 <= queue_id < len(info_queues):
            raise OffsetOutOfRange(f"topic {topic} has queues 0..{len(info_queues) - 1}, "
                                   f"not queue_id {queue_id}")
        cq = self._dispatcher.existing_queue(topic, queue_id)
        low, high = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
        if queue_offset > high:
            raise OffsetOutOfRange(f"queue offset {queue_offset} is past the end of {topic} "
                                   f"queue {queue_id} (max {high})")
        start = max(queue_offset, low)
        if tags is not None and (not tags or "*" in tags):
            tags = None
        codes = {tags_code(t) for t in tags} if tags else None
        messages: list[Any] = []
        tags_of = reader.tags
        next_offset = start
        if cq is not None and max_count > 0:
            scan = max_count * (MAX_PULL_SCAN_FACTOR if codes else 1)
            entries = list(ENTRY.iter_unpack(cq.read_raw(start, scan)))
            # the entries whose tag hash matches (C3), with their index; their records read a
            # page at a time, one pread a run of records lying close together
            # (DEC-pull-page-spans), never more than the page still needs
            wanted = [(i, *e) for i, e in enumerate(entries) if codes is None or e[2] in codes]
            next_offset = start + len(entries)
            k = 0
            while k < len(wanted) and len(messages) < max_count:
                page = wanted[k:k + max_count - len(messages)]
                k += len(page)
                for (i, *_), record in zip(page, self._commitlog.read_records(page, 1, reader),
                                           strict=True):
                    if record is None:
                        continue  # its segment was deleted (retention)
                    if tags is not None and tags_of(record) not in tags:
                        continue
                    messages.append(record)
                    if len(messages) >= max_count:
                        next_offset = start + i + 1
                        break
        return QueueRead(messages, next_offset, low, high)

    def get_by_commitlog_offset(self, commitlog_offset: int) -> CommitLogRecord:
        """MessageNotFound if no record starts there (or its segment is deleted)."""
        return self._commitlog.read_record(commitlog_offset)

    def queue_end(self, topic: str, queue_id: int) -> int:
        """A queue's max offset (where the next append goes), as :meth:`read_queue` reads it;
        0 for a queue that has no entries or does not exist. Nothing is checked: the pull on
        the poller asks it to tell whether a read would find entries (DEC-poller-pull)."""
        cq = self._dispatcher.existing_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    @overload
    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
             tags: frozenset[str] | None, wait_ms: int, hold_max: int
             ) -> QueueRead[CommitLogRecord]: ...

    @overload
    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
             tags: frozenset[str] | None, wait_ms: int, hold_max: int,
             reader: RecordReader[Item]) -> QueueRead[Item]: ...

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
             tags: frozenset[str] | None, wait_ms: int, hold_max: int,
             reader: RecordReader[Any] = RECORDS) -> QueueRead[Any]:
        """:meth:`read_queue`, held up to ``wait_ms`` while nothing at the offset matches (the
        pull hold: woken by an append to the queue; at most ``hold_max`` pulls held, past it
        the pull answers at once)."""
        read = self.read_queue(topic, queue_id, queue_offset, max_count, tags, reader)
        if not wait_ms or not nothing_yet(read):
            return read

        def read_from(offset: int) -> QueueRead[Any]:
            return self.read_queue(topic, queue_id, offset, max_count, tags, reader)

        return held_read(self._arrivals, read_from, read, topic, queue_id, hold_max, wait_ms)

    def get_by_msg_id(self, msg_id: str, max_count: int = MAX_COPIES) -> list[CommitLogRecord]:
        """Every stored copy of a message, oldest first: the records whose unique
        id (UNIQ_KEY) is ``msg_id``, in any topic - the parked copy, the delivered one, its
        retries, its dead letter, its resends - and, when ``msg_id`` is an offsetMsgId, the
        record stored there with every copy of its message. MessageNotFound when none."""
        return self._lookup.by_msg_id(msg_id, max_count)

    def topic_since(self, topic: str) -> int:
        """The CommitLog offset a topic was created at (older records: a deleted namesake)."""
        cfg = self._topics.get(topic)
        return cfg.since if cfg is not None else 0

    def get_by_key(self, topic: str, key: str, max_count: int = 32) -> list[CommitLogRecord]:
        """Messages of a topic whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``: the
        newest ``max_count``, oldest first."""
        return self._lookup.by_key(topic, key, max_count, self.topic_since(topic))

    # ---- schedule (scheduler's hand-over) ------------------------------------------------
    def schedule_entries(self, level: int, queue_offset: int, max_count: int) -> LevelEntries:
        """Deliver times (raw tagsCode) of a level's schedule queue from queue_offset (D3, D8
        done by caller; an offset below the minimum reads from the minimum)."""
        cq = self._handover.queue(level)
        start = min(max(queue_offset, cq.min_offset), cq.max_offset)
        raw = cq.read_raw(start, max(0, max_count))
        deliver_ts = [code for _, _, code in ENTRY.iter_unpack(raw)]
        return LevelEntries(level, start, deliver_ts, cq.min_offset, cq.max_offset,
                            self._dispatcher.mark(level))

    def handover(self, level: int, from_offset: int, max_count: int,
                 now_ms: int | None = None, fence: int | None = None) -> HandoverResult:
        """Deliver the due entries of a level from the entry after its handed-over mark, up to
        ``max_count`` (D3 correction, D4 rebuild, D5 stop at first not due, D7 park, D9 skip
        entries at or below the mark), a chunk of the writer lock at a time
        (``schedule/handover.py``). Durable and idempotent. A ``fence`` older than one a
        hand-over of the level carried is refused (Fenced; DEC-scheduler-lease)."""
        return self._handover.level(level, from_offset, max_count,
                                    _now_ms() if now_ms is None else now_ms, fence)

    def newest_fence(self, level: int) -> int | None:
        """The newest fencing token a hand-over of ``level`` (``TIMER_LEVEL``: the timers')
        carried since the store started (DEC-scheduler-lease)."""
        return self._fences.newest(level)

    def handover_timers(self, max_count: int, wait_ms: int,
                        now: Callable[[], int] = _now_ms,
                        fence: int | None = None) -> TimerHandoverResult:
        """The scheduler's timer hand-over: the due timers, earliest first; when none is due,
        wait up to ``wait_ms`` for one (T1, T2, D9); a stale ``fence`` refused before any wait
        (DEC-scheduler-lease)."""
        return self._timers.handover_wait(max_count, wait_ms, now, fence)

    def timer_backlog(self, now_ms: int) -> TimerBacklog:
        return self._timers.backlog(now_ms)

    def timer_target(self, deliver_at: int | None, delay_ms: int | None) -> int:
        """A reschedule's asked time, checked against the timer cap (T1)."""
        return self._timers.target(deliver_at, delay_ms)

    def copies_of(self, msg_id: str) -> Copies:
        """msgId -> every stored copy of the message (:meth:`get_by_msg_id`), for a cancel or
        reschedule (T2)."""
        return {msg_id: self.get_by_msg_id(msg_id)}

    def copies_by_key(self, topic: str, key: str) -> Copies:
        """msgId -> stored copies of the messages of ``topic`` whose KEYS hold ``key`` or whose
        UNIQ_KEY is ``key`` (T2 by key); TopicNotFound."""
        self.get_topic(topic)
        return self._timers.copies_by_key(topic, key, self.topic_since(topic))

    def cancel_or_reschedule(self, copies: Copies, deliver_at: int | None) -> Outcome:
        """Cancel (``deliver_at`` None) or reschedule the pending delayed messages whose
        stored copies are ``copies`` (T2): durable like a produce, exactly one of a cancel and
        the hand-over of the same entry happens."""
        return self._timers.act(copies, deliver_at)

    # ---- consumer progress -------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self._groups.commit(group, topic, queue_id, queue_offset)

    def group_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        """{topic: {queue_id: offset}}."""
        return self._groups.get(group, topic)

    def parked_states(self, records: Sequence[CommitLogRecord]) -> dict[int, ParkedState]:
        """Where each parked copy among ``records`` stands (pending, delivered, cancelled), by
        CommitLog offset (a message's history)."""
        return self._timers.parked_states(records)

    def cancel_times(self, records: Sequence[CommitLogRecord]) -> dict[int, int]:
        """When each cancelled parked copy among ``records`` was cancelled (its tombstone's
        store time), by CommitLog offset; a copy whose tombstone is not found is left out."""
        return self._timers.cancel_times(records)

    def topic_offsets(self, topic: str) -> dict[str, dict[int, int]]:
        """Every group's committed offsets on ``topic``: {group: {queue_id: offset}}."""
        return self._groups.topic_offsets(topic)

    # ---- consumer-group settings (R3, R5) ----------------------------------------------------
    def group_settings(self, group: str) -> GroupSettings | None:
        return self._group_settings.get(group)

    def all_group_settings(self) -> dict[str, GroupSettings]:
        return self._group_settings.all()

    def put_group_settings(self, group: str, body: object) -> tuple[GroupSettings, bool]:
        """(settings, created): ``body`` (a PUT's fields) merged over the group's settings or
        the defaults, validated (ValidationError), and written durably before returning."""
        validate_group_name(group)
        settings = validate_settings(body, self._group_settings.get(group))
        created = self._group_settings.put(group, settings)
        if created:
            logger.info("group created group=%s retry_queue_nums=%d retry_max_times=%d", group,
                        settings.retry_queue_nums, settings.retry_max_times)
        return settings, created

    # ---- flushing ----------------------------------------------------------------------------
    def flush(self) -> int:
        """fsync the CommitLog, ConsumeQueues and key index, then write the checkpoint;
        returns the checkpointed CommitLog offset."""
        return self._flusher.flush()

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
        scheduled messages in them are carried forward first (schedule/carry_forward.py).
        Returns how many segments were deleted."""
        with self._flusher.lock:
            removed = self._retention.delete_expired(_now_ms() if now_ms is None else now_ms)
            if removed:
                self._flusher.force()
        if removed:
            self.flush()
        return removed

    # ---- disk guard (SPEC P4) ----------------------------------------------------------------
    def check_disk(self) -> None:
        """DiskFull (507) while the disk is past its high-water mark."""
        self._disk.check()

    # ---- lifecycle -------------------------------------------------------------------------
    def release_waits(self) -> None:
        """The store stops: held pulls and the timers' waiting hand-over answer now, and no
        request waits again (the graceful stop)."""
        self._arrivals.close()
        self._timers.release()

    def close(self) -> None:
        """Flush everything, write checkpoints, stop threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.release_waits()
        self._stop.set()
        self._group_commit.stop()
        for thread in self._threads:
            thread.join()
        self.flush()
        self._groups.persist()
        with self._writer.lock:
            self._retention.close()
            self._dispatcher.close()
            self._commitlog.close()
        logger.info("store closed data_dir=%s", self._dirs.root)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- observability -------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Counters and gauges for /metrics (puts, bytes, flushed offset, per-level backlog)."""
        cl = self._commitlog
        out: dict[str, float] = {name: float(v) for name, v in self._counters.items()}
        out["commitlog_min_offset"] = cl.min_offset
        out["commitlog_max_offset"] = cl.max_offset
        out["commitlog_flushed_offset"] = cl.flushed_offset
        out["commitlog_segments"] = len(cl.segments)
        out["topics"] = len(self._topics.all()) + 1
        out["timer_handed_over_total"] = self._timers.handed_over  # SPEC T1
        staging = self._handover.staging  # DEC-timer-staging
        out["timer_staged_total"] = staging.made
        out["timer_staged_used_total"] = staging.used
        out["timer_staged"] = len(staging)
        out["held_pulls"] = self._arrivals.held  # DEC-pull-hold
        out.update(self._disk.stats())
        out.update(self._dispatcher.key_index.stats())
        for level in self._levels.levels():
            queue_id = self._levels.queue_id(level)
            cq = self._dispatcher.existing_queue(naming.SCHEDULE_TOPIC, queue_id)
            high = cq.max_offset if cq is not None else 0
            mark = self._dispatcher.mark(level)
            out[f"schedule_max_offset_level_{level}"] = high
            out[f"schedule_handed_over_level_{level}"] = mark
            out[f"schedule_backlog_level_{level}"] = max(0, high - mark - 1)
        return out

