"""MessageStore: the engine's one entry point (CommitLog + ConsumeQueues + dispatch + indexes).

Thread-safe: one writer lock serialises appends (validation and encoding happen before it);
reads run concurrently. Dispatch is synchronous inside the append. Recovery (P3) runs in the
constructor; background threads flush (async: every flush_interval_ms; sync: group commit) and
keep house (group offsets and the disk guard each second, retention each minute; every second
while the disk is past its warning level).
"""

from __future__ import annotations

import logging
import shutil
import time

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
from clepsydra_core.msgid import offset_msg_id
from clepsydra_core.records import CommitLogRecord, tags_code
from clepsydra_core.validation import check_consumable, validate_group_name, validate_topic_name
from clepsydra_core.wire.copy import CopyItem, RangeCopy, SkippedCopy
from clepsydra_core.wire.schedule import ScheduleEntries
from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.index.consume_queue import ENTRY
from clepsydra_store.engine.store_core import StoreCore
from clepsydra_store.engine.types import (
    HandoverResult,
    PutRequest,
    PutResult,
    QueueInfo,
    QueueRead,
    RangeCopyResult,
    TopicInfo,
)
from clepsydra_store.engine.write.codec import Prepared
from clepsydra_store.engine.write.encoder import BatchEncoder

logger = logging.getLogger(__name__)

MAX_PULL_SCAN_FACTOR = 16
"""A tag-filtered pull scans at most this many entries per message asked for."""
MAX_COPIES = 1000
"""A look-up by msgId returns at most this many copies (the newest)."""


class TopicBusy(ClepsydraError):
    """A topic cannot shrink: a queue it would hide still holds unconsumed messages (A1)."""

    code = "TOPIC_NOT_DRAINED"
    http_status = 409


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(StoreCore):
    def __init__(self, config: EngineConfig) -> None:
        """Recover (P3) from config.data_dir and start background threads (flush, retention)."""
        super().__init__(config)

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
        with self._lock:  # no append lands in a queue between the check and the change
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
        with self._lock:
            self._force_checkpoint = True
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
        items = BatchEncoder(self._preparer, ensure).prepare(requests)
        return self._store(items, ensure)

    def copy(self, requests: list[CopyItem]) -> list[PutResult]:
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

    def copy_range(self, req: RangeCopy) -> RangeCopyResult:
        """Internal: copy a range of a queue (see :class:`RangeCopy`); all checked
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
            items.append(self._preparer.copy(CopyItem(
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
        with self._lock:
            results, end = self._append_locked(items)
        return self._acknowledge(results, end)

    # ---- read --------------------------------------------------------------------------------
    def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   tags: frozenset[str] | None = None) -> QueueRead:
        """Pull from a queue (C3 tag filter by hash then by string). queue_offset below min
        reads from min; above max -> OffsetOutOfRange; bad queue_id -> OffsetOutOfRange.
        The schedule topic is refused (Forbidden, S3)."""
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
        messages: list[CommitLogRecord] = []
        next_offset = start
        if cq is not None and max_count > 0:
            scan = max_count * (MAX_PULL_SCAN_FACTOR if codes else 1)
            raw = cq.read_raw(start, scan)
            read = self._commitlog.read_record
            for commitlog_offset, size, code in ENTRY.iter_unpack(raw):
                next_offset += 1
                if codes is not None and code not in codes:
                    continue
                try:
                    record = read(commitlog_offset, size)
                except MessageNotFound:
                    continue  # its segment was deleted (retention)
                if tags is not None and record.tags not in tags:
                    continue
                messages.append(record)
                if len(messages) >= max_count:
                    break
        return QueueRead(messages, next_offset, low, high)

    def get_by_commitlog_offset(self, commitlog_offset: int) -> CommitLogRecord:
        """MessageNotFound if no record starts there (or its segment is deleted)."""
        return self._commitlog.read_record(commitlog_offset)

    def get_by_msg_id(self, msg_id: str, max_count: int = MAX_COPIES) -> list[CommitLogRecord]:
        """Every stored copy of a message, oldest first (issue 20.4): the records whose unique
        id (UNIQ_KEY) is ``msg_id``, in any topic - the parked copy, the delivered one, its
        retries, its dead letter, its resends - and, when ``msg_id`` is an offsetMsgId, the
        record stored there with every copy of its message. MessageNotFound when none."""
        found: dict[int, CommitLogRecord] = {}
        wanted = {msg_id, msg_id.upper()}
        located = offset_msg_id(msg_id)
        if located is not None:
            try:
                record = self._commitlog.read_record(located.commitlog_offset)
            except MessageNotFound:
                record = None
            if record is not None and record.offset_msg_id == msg_id.upper():
                found[record.commitlog_offset] = record
                wanted.add(record.msg_id)
        for uniq in wanted:
            for commitlog_offset in self._dispatcher.key_index.newest(uniq):
                if len(found) >= max_count:
                    break
                if commitlog_offset in found:
                    continue
                try:
                    record = self._commitlog.read_record(commitlog_offset)
                except MessageNotFound:
                    continue  # its segment was deleted (retention)
                if record.properties.get(P.UNIQ_KEY) == uniq:
                    found[commitlog_offset] = record
        if not found:
            raise MessageNotFound(f"no message with msgId {msg_id}")
        return [found[offset] for offset in sorted(found)]

    def topic_since(self, topic: str) -> int:
        """The CommitLog offset a topic was created at (older records: a deleted namesake)."""
        cfg = self._topics.get(topic)
        return cfg.since if cfg is not None else 0

    def get_by_key(self, topic: str, key: str, max_count: int = 32) -> list[CommitLogRecord]:
        """Messages of a topic whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``: the
        newest ``max_count``, oldest first."""
        found: list[CommitLogRecord] = []
        cfg = self._topics.get(topic)
        since = cfg.since if cfg is not None else 0
        for commitlog_offset in self._dispatcher.key_index.newest(key):
            if len(found) >= max_count or commitlog_offset < since:
                break
            try:
                record = self._commitlog.read_record(commitlog_offset)
            except MessageNotFound:
                continue
            if record.topic == topic and (key in record.keys
                                          or record.properties.get(P.UNIQ_KEY) == key):
                found.append(record)
        found.reverse()
        return found

    def _copies_of(self, msg_id: str) -> list[CommitLogRecord]:
        return self.get_by_msg_id(msg_id)

    # ---- schedule (scheduler's hand-over) ------------------------------------------------
    def schedule_entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries:
        """Deliver times (raw tagsCode) of a level's schedule queue from queue_offset (D3, D8
        done by caller; an offset below the minimum reads from the minimum)."""
        cq = self._handover.queue(level)
        start = min(max(queue_offset, cq.min_offset), cq.max_offset)
        raw = cq.read_raw(start, max(0, max_count))
        deliver_ts = [code for _, _, code in ENTRY.iter_unpack(raw)]
        return ScheduleEntries(level, start, deliver_ts, cq.min_offset, cq.max_offset,
                               self._dispatcher.mark(level))

    def handover(self, level: int, from_offset: int, max_count: int,
                 now_ms: int | None = None, fence: int | None = None) -> HandoverResult:
        """Deliver due entries [from_offset, from_offset+max_count) of a level into their real
        topics (D3 correction, D4 rebuild, D5 stop at first not due, D7 park, D9 skip entries
        at or below the level's handed-over mark). Durable and idempotent. A ``fence`` older
        than one a hand-over of the level carried is refused (Fenced; DEC-scheduler-lease)."""
        now = _now_ms() if now_ms is None else now_ms
        end = None
        with self._lock:
            self._handover.check_level(level)
            self.fences.admit(level, fence)
            plan = self._handover.plan(level, from_offset, max_count, now)
            stored_at = 0
            if plan.items:
                stored_at, end = self._append_copies(plan.items)
            for queue_offset in plan.cancelled:
                self._dispatcher.raise_mark(level, queue_offset)
            handed_over = self._dispatcher.mark(level)
        self._acknowledge([], end)
        lateness: list[int] = []
        delivered_messages: list[tuple[str, str, str | None, int]] = []
        for item, ok, traceparent in zip(plan.items, plan.delivered, plan.traceparents,
                                         strict=True):
            if ok:
                late = stored_at - item.deliver_ts
                lateness.append(late)
                delivered_messages.append((item.topic, item.uniq_key, traceparent, late))
        delivered = len(lateness)
        self._counters["schedule_delivered_total"] += delivered
        self._counters["schedule_parked_total"] += len(plan.items) - delivered
        self._counters["schedule_skipped_total"] += plan.skipped
        if plan.items:
            logger.info("schedule handover level=%d from_offset=%d next_offset=%d delivered=%d "
                        "parked=%d skipped=%d", level, plan.start, plan.next_offset, delivered,
                        len(plan.items) - delivered, plan.skipped)
        return HandoverResult(level, plan.start, plan.next_offset, delivered,
                              len(plan.items) - delivered, plan.skipped, plan.not_due,
                              plan.next_deliver_ts, lateness, handed_over,
                              delivered_messages=delivered_messages)

    # ---- consumer progress -------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self._groups.commit(group, topic, queue_id, queue_offset)

    def group_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        """{topic: {queue_id: offset}}."""
        return self._groups.get(group, topic)

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
        out["timer_handed_over_total"] = self.timers.handed_over  # issue 15
        out["held_pulls"] = self.arrivals.held  # issue 14, the pull hold
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

