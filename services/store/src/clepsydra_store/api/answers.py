"""The wire values of the engine's values, both ways: a wire request (``clepsydra_core.wire``)
as the engine's request type, an engine result as the wire answer (topics, messages, copies,
the hand-overs, the timer backlog). The engine knows no wire type; the routes convert here,
once each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clepsydra_core.errors import ValidationError
from clepsydra_core.records import CommitLogRecord, decode_view, message_to_json
from clepsydra_core.wire import history
from clepsydra_core.wire.copy import CopyItem, RangeCopy, RangeCopyAnswer
from clepsydra_core.wire.copy import SkippedCopy as WireSkippedCopy
from clepsydra_core.wire.schedule import HandoverAnswer, ScheduleEntries
from clepsydra_core.wire.timers import (
    CANCELLED,
    RESCHEDULED,
    HourCount,
    Lateness,
    TimerBacklog,
    TimerHandoverAnswer,
)
from clepsydra_store.engine import types as engine


def copy_request(item: CopyItem) -> engine.CopyRequest:
    return engine.CopyRequest(item.commitlog_offset, item.topic, item.queue_id,
                              item.delay_level, item.reconsume_times, item.set_properties,
                              item.remove_properties, item.append_properties)


def range_copy_request(req: RangeCopy) -> engine.RangeCopyRequest:
    return engine.RangeCopyRequest(req.topic, req.queue_id, req.from_offset, req.target_topic,
                                   req.max_count, req.delay_level, req.reconsume_times,
                                   req.remove_properties, req.append_properties)


def range_copy_answer(r: engine.RangeCopyResult) -> RangeCopyAnswer:
    return RangeCopyAnswer(r.copied, r.copied_msg_ids,
                           [WireSkippedCopy(s.queue_offset, s.msg_id, s.reason)
                            for s in r.skipped], r.next_offset, r.last_commitlog_offset)


def entries_answer(e: engine.LevelEntries) -> ScheduleEntries:
    return ScheduleEntries(e.level, e.queue_offset, e.deliver_ts, e.min_offset, e.max_offset,
                           e.handed_over)


def handover_answer(r: engine.HandoverResult) -> HandoverAnswer:
    return HandoverAnswer(r.level, r.from_offset, r.next_offset, r.delivered, r.parked,
                          r.skipped, r.not_due, r.next_deliver_ts, r.lateness_ms, r.handed_over)


def timer_handover_answer(r: engine.TimerHandoverResult) -> TimerHandoverAnswer:
    return TimerHandoverAnswer(r.delivered, r.parked, r.next_due_at, r.lateness_ms)


def timer_backlog_answer(b: engine.TimerBacklog) -> TimerBacklog:
    lateness = None if b.lateness is None else Lateness(b.lateness.p50, b.lateness.p99,
                                                          b.lateness.max)
    return TimerBacklog(b.pending, [HourCount(h.hour, h.count) for h in b.by_hour_ahead],
                        b.handed_over, b.next_due_at, lateness)


PARKED_STATES = {engine.ParkedState.PENDING: history.PENDING,
                 engine.ParkedState.DELIVERED: history.DELIVERED,
                 engine.ParkedState.CANCELLED: history.CANCELLED}
"""A parked copy's state in a message's history."""


def topic_json(info: engine.TopicInfo) -> dict[str, Any]:
    return {"name": info.name, "system": info.system,
            "queues": [{"queueId": q.queue_id, "minOffset": q.min_offset,
                        "maxOffset": q.max_offset} for q in info.queues]}


def messages_json(records: list[CommitLogRecord], with_body: bool = True) -> list[dict[str, Any]]:
    return [message_to_json(r, with_body=with_body) for r in records]


class MessageViews:
    """A pull's messages read straight as their v1 JSON view (``decode_view``: no record
    between the bytes read and the answer, DEC-pull-json-view), with or without the body: the
    engine's reader of a pull's page (``RecordReader``)."""

    __slots__ = ("with_body",)

    def __init__(self, with_body: bool) -> None:
        self.with_body = with_body

    def decode(self, raw: bytes, pos: int) -> tuple[dict[str, Any], int]:
        return decode_view(raw, pos, self.with_body)

    def of(self, record: CommitLogRecord) -> dict[str, Any]:
        return message_to_json(record, with_body=self.with_body)

    @staticmethod
    def offset(item: dict[str, Any]) -> int:
        return int(item["commitLogOffset"])

    @staticmethod
    def tags(item: dict[str, Any]) -> str | None:
        tags: str | None = item["tags"]
        return tags


VIEWS = {True: MessageViews(True), False: MessageViews(False)}
"""The pull's readers, by ``with_body``."""


def with_body_arg(args: Mapping[str, str]) -> bool:
    """``?body=false``: headers only, the body left out of the answer; ``true`` (or absent):
    with it. Anything else is a 400 (the documents say boolean)."""
    raw = args.get("body", "true")
    if raw not in ("true", "false"):
        raise ValidationError(f"query parameter body={raw!r} must be true or false",
                              code="INVALID_REQUEST")
    return raw == "true"


FATES = {engine.Fate.CANCELLED: CANCELLED, engine.Fate.RESCHEDULED: RESCHEDULED}
"""The ``status`` of a cancel's or a reschedule's answer."""
