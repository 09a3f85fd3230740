"""Scheduler hand-over (SPEC D3-D9): under the writer lock, read a level's due schedule entries
and rebuild each for its real topic (or park it in %SCHEDULE_ERROR%), as records carrying
``SCHEDULE_OFFSET`` so their dispatch raises the level's handed-over mark."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import MessageNotFound, ValidationError
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import CommitLogRecord
from clepsydra_store.engine.commitlog import CommitLog
from clepsydra_store.engine.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.dispatch import Dispatcher
from clepsydra_store.engine.prepare import Prepared
from clepsydra_store.engine.topics import TopicRegistry

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class HandoverPlan:
    start: int
    next_offset: int
    items: list[Prepared] = field(default_factory=list)
    delivered: list[bool] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    """The producer's ``traceparent`` of each item (None if absent or parked), for O1."""
    skipped: int = 0
    not_due: bool = False
    next_deliver_ts: int | None = None


class Scheduler:
    """Plans a hand-over batch; the caller appends ``plan.items`` under the same lock."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, topics: TopicRegistry,
                 levels: DelayLevels, segment_size_bytes: int) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.topics = topics
        self.levels = levels
        self.segment_size_bytes = segment_size_bytes

    def check_level(self, level: int) -> None:
        if not 1 <= level <= self.levels.max_level:
            raise ValidationError(f"delay level {level} is not in 1..{self.levels.max_level}",
                                  rule="L1", code="INVALID_DELAY_LEVEL")

    def queue(self, level: int) -> ConsumeQueue:
        self.check_level(level)
        return self.dispatcher.queue(naming.SCHEDULE_TOPIC, self.levels.queue_id(level))

    def start_offset(self, level: int, cq: ConsumeQueue, from_offset: int) -> int:
        """D8: below the queue minimum -> the minimum; above its maximum -> the maximum."""
        if from_offset < cq.min_offset:
            logger.warning("schedule progress below queue minimum level=%d from_offset=%d "
                           "min_offset=%d", level, from_offset, cq.min_offset)
            return cq.min_offset
        if from_offset > cq.max_offset:
            logger.warning("schedule progress above queue maximum level=%d from_offset=%d "
                           "max_offset=%d", level, from_offset, cq.max_offset)
            return cq.max_offset
        return from_offset

    def plan(self, level: int, from_offset: int, max_count: int, now_ms: int) -> HandoverPlan:
        cq = self.queue(level)
        start = self.start_offset(level, cq, from_offset)
        plan = HandoverPlan(start=start, next_offset=start)
        delay_ms = self.levels.delay_ms(level)
        mark = self.dispatcher.mark(level)
        raw = cq.read_raw(start, max(0, max_count))
        for i, (commitlog_offset, size, code) in enumerate(ENTRY.iter_unpack(raw)):
            queue_offset = start + i
            deliver_ts = now_ms if code > now_ms + delay_ms else code  # D3 correction
            if deliver_ts > now_ms:  # D5
                plan.not_due = True
                plan.next_deliver_ts = deliver_ts
                break
            plan.next_offset = queue_offset + 1
            if queue_offset <= mark:  # D9: handed over before a crash; write nothing
                plan.skipped += 1
                continue
            item, delivered, traceparent = self._rebuild(level, queue_offset, commitlog_offset,
                                                         size, deliver_ts)
            plan.items.append(item)
            plan.delivered.append(delivered)
            plan.traceparents.append(traceparent)
        return plan

    def _rebuild(self, level: int, queue_offset: int, commitlog_offset: int, size: int,
                 deliver_ts: int) -> tuple[Prepared, bool, str | None]:
        """D4 rebuild for the real topic, or a D7 park in %SCHEDULE_ERROR%; with the
        producer's ``traceparent`` of a delivered message (O1)."""
        mark = (level, queue_offset)
        schedule_offset = f"{level}:{queue_offset}"
        try:
            record = self.commitlog.read_record(commitlog_offset, size)
        except MessageNotFound as exc:
            props = {P.SCHEDULE_ERROR: f"unreadable: {exc}", P.SCHEDULE_OFFSET: schedule_offset}
            return (self._park(CommitLogRecord(topic="", body=b""), props, mark, deliver_ts),
                    False, None)
        props = dict(record.properties)
        props.pop(P.DELAY, None)
        props[P.SCHEDULE_OFFSET] = schedule_offset
        props[P.DELIVER_TS] = str(deliver_ts)
        topic, queue_id, reason = self._destination(record)
        if reason is not None:
            props[P.SCHEDULE_ERROR] = reason
            return self._park(record, props, mark, deliver_ts), False, None
        prepared = Prepared.build(topic, queue_id, record.body, props, flag=record.flag,
                              sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
                              born_host=record.born_host,
                              reconsume_times=record.reconsume_times, mark=mark,
                              deliver_ts=deliver_ts, max_size=self.segment_size_bytes)
        return prepared, True, props.get(P.TRACEPARENT)

    def _destination(self, record: CommitLogRecord) -> tuple[str, int, str | None]:
        """(real topic, real queue id, None) or ("", 0, why it cannot be rebuilt)."""
        props = record.properties
        topic = props.get(P.REAL_TOPIC)
        if not topic:
            return "", 0, "no_real_topic"
        if topic == naming.TRANSACTION_HALF_TOPIC:
            return "", 0, f"transaction_half_topic: {topic}"
        cfg = self.topics.get(topic)
        if cfg is None and (naming.is_retry_topic(topic) or naming.is_dlq_topic(topic)):
            cfg, _ = self.topics.create(topic, 1, True)
            logger.info("topic auto-created for schedule delivery topic=%s queues=1", topic)
        if cfg is None:
            return "", 0, f"real_topic_missing: {topic}"
        try:
            queue_id = int(props.get(P.REAL_QID, ""))
        except ValueError:
            return "", 0, f"bad_real_qid: {props.get(P.REAL_QID)!r}"
        if not 0 <= queue_id < cfg.queues:
            return "", 0, f"real_qid_out_of_range: {topic} has {cfg.queues} queues, " \
                          f"REAL_QID={queue_id}"
        return topic, queue_id, None

    def _park(self, record: CommitLogRecord, props: dict[str, str], mark: tuple[int, int],
              deliver_ts: int) -> Prepared:
        if self.topics.get(naming.SCHEDULE_ERROR_TOPIC) is None:
            self.topics.create(naming.SCHEDULE_ERROR_TOPIC, 1, True)
        logger.warning("scheduled message parked level=%d queue_offset=%d commitlog_offset=%d "
                       "reason=%s", mark[0], mark[1], record.commitlog_offset,
                       props.get(P.SCHEDULE_ERROR))
        return Prepared.build(naming.SCHEDULE_ERROR_TOPIC, 0, record.body, props,
                              flag=record.flag, sys_flag=record.sys_flag,
                              born_timestamp=record.born_timestamp, born_host=record.born_host,
                              reconsume_times=record.reconsume_times, mark=mark,
                              deliver_ts=deliver_ts, max_size=self.segment_size_bytes)

    def protect_offset(self) -> tuple[int, int] | None:
        """(smallest CommitLog offset of a schedule entry not yet handed over, its level), for
        retention (P4); None when every level is fully handed over."""
        best: tuple[int, int] | None = None
        for level in self.levels.levels():
            cq = self.dispatcher.existing_queue(naming.SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            first = max(self.dispatcher.mark(level) + 1, cq.min_offset)
            if first >= cq.max_offset:
                continue
            entry = cq.entry(first)
            if entry is not None and (best is None or entry.commitlog_offset < best[0]):
                best = (entry.commitlog_offset, level)
        return best
