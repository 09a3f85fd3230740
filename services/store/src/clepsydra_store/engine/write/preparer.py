"""Turning requests into records ready to place (``codec.Prepared``): validation (P1, L2,
S3), routing (S1 park in the schedule topic, R10 dead-lettering of plain sends to %RETRY%) and
the pre-encoded record tail, all done before the writer lock is taken. Offsets and the store
timestamp are filled in under the lock by MessageStore."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    Forbidden,
    NoPermission,
    OffsetOutOfRange,
    TopicNotFound,
    ValidationError,
)
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels, format_delay
from clepsydra_core.msgid import UniqIds, uniq_prefix
from clepsydra_core.records import CommitLogRecord, is_transaction_prepared_or_rollback
from clepsydra_core.retry_rules import DEFAULT_MAX_RECONSUME_TIMES, max_reconsume_times_or
from clepsydra_core.validation import (
    check_producible,
    validate_body,
    validate_properties,
    validate_text,
    validate_topic_name,
)
from clepsydra_core.wire.copy import CopyItem
from clepsydra_store.engine.config import TIMER_MAX_DELAY_VAR, EngineConfig
from clepsydra_store.engine.index.dispatcher import PARKED_TIMER
from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.engine.write.codec import Prepared

DLQ_REASON_MAX_RECONSUME = "max_reconsume_times"


class Preparer:
    def __init__(self, config: EngineConfig, topics: TopicRegistry,
                 group_settings: Callable[[str], GroupSettings | None] = lambda _: None) -> None:
        self.config = config
        self.levels: DelayLevels = config.delay_levels
        self.topics = topics
        self.group_settings = group_settings
        """The settings of a consumer group, None when it has none (R3, R5 for %RETRY%)."""
        self._rr: dict[str, Iterator[int]] = {}
        self.ids = UniqIds(uniq_prefix(config.store_host.rpartition(":")[0]))
        """The unique ids (msgIds) the store gives messages whose producer gave none."""

    def seed_round_robin(self, topic: str, start: int) -> None:
        self._rr[topic] = itertools.count(start)

    def queue_count(self, topic: str, ensure: dict[str, int]) -> int | None:
        if topic == naming.SCHEDULE_TOPIC:
            return self.levels.max_level
        cfg = self.topics.get(topic)
        return cfg.queues if cfg is not None else ensure.get(topic)

    def round_robin(self, topic: str) -> Iterator[int]:
        """The topic's counter for queue picks (``next(counter) % queues``)."""
        counter = self._rr.get(topic)
        if counter is None:
            counter = self._rr.setdefault(topic, itertools.count())
        return counter

    def pick_queue(self, topic: str, queues: int, queue_id: int | None) -> int:
        if queue_id is None:
            return next(self.round_robin(topic)) % queues
        if not 0 <= queue_id < queues:
            raise OffsetOutOfRange(f"topic {topic} has queues 0..{queues - 1}, "
                                   f"not queue_id {queue_id}")
        return queue_id

    def check_writable(self) -> None:
        if not self.config.writable:
            raise NoPermission("the store does not accept writes now", rule="R2")

    def _park(self, props: dict[str, str], topic: str, queue_id: int,
              level: int) -> tuple[str, int, int]:
        """S1: (schedule topic, level - 1, delay ms); REAL_TOPIC/REAL_QID/DELAY set."""
        props[P.REAL_TOPIC] = topic
        props[P.REAL_QID] = str(queue_id)
        props[P.DELAY] = str(level)
        return naming.SCHEDULE_TOPIC, self.levels.queue_id(level), self.levels.delay_ms(level)

    # ---- put -------------------------------------------------------------------------------
    def check_topic(self, topic: str, ensure: dict[str, int]) -> tuple[int, bool]:
        """(queues, auto-create as %RETRY%) of a produce target (P1, S3, existence)."""
        validate_topic_name(topic)
        check_producible(topic)
        queues = self.queue_count(topic, ensure)
        if queues is not None:
            return queues, False
        if not naming.is_retry_topic(topic):
            raise TopicNotFound(f"topic {topic} does not exist")
        group = self.group_settings(naming.group_of_retry_topic(topic) or "")
        if group is not None and group.retry_queue_nums > 0:  # R3: the group's count
            return group.retry_queue_nums, True
        return self.config.retry_topic_queues, True

    def put(self, req: PutRequest, ensure: dict[str, int],
            checked: dict[str, tuple[int, bool]] | None = None) -> Prepared:
        """Validate and route one produce request (nothing is written here); topics to be
        auto-created go into ``ensure`` (name -> queues). ``checked`` caches topic checks
        across one batch. The produce encoder (``batch_encoder.BatchEncoder``) stores every
        request that passes its plain checks itself and calls this for the others, to raise
        the error that names the refusal (issue 13.3)."""
        topic = req.topic
        hit = checked.get(topic) if checked is not None else None
        if hit is None:
            hit = self.check_topic(topic, ensure)
            self.check_writable()
            if checked is not None:
                checked[topic] = hit
        queues, create_retry = hit
        body = req.body
        if type(body) is not bytes:
            raise ValidationError("body must be bytes", rule="P1", code="INVALID_REQUEST")
        validate_body(body, self.config.max_body_bytes)
        props = dict(validate_properties(req.properties)) if req.properties else {}
        if not props.get(P.UNIQ_KEY):  # issue 20.4: every message has its unique id
            props[P.UNIQ_KEY] = self.ids.new()
        if req.tags:
            props[P.TAGS] = validate_text(req.tags, "tags") or ""
        if req.keys:
            props[P.KEYS] = validate_text(req.keys, "keys") or ""
        level = self.levels.clamp(req.delay_level) if req.delay_level else 0
        timer = req.deliver_at is not None or req.delay_ms is not None
        reconsume = req.reconsume_times
        if create_retry or naming.is_retry_topic(topic):
            group = self.group_settings(naming.group_of_retry_topic(topic) or "")
            reconsume, max_times = retry_counts(
                props, reconsume,
                group.retry_max_times if group is not None else DEFAULT_MAX_RECONSUME_TIMES)
            # R10 reroutes plain sends only: a delayed copy (an R9 fallback's retry) is a
            # retry, whose count reaches the max before its last attempt (issue 12.2)
            if reconsume >= max_times and not level and not timer:  # R10
                dlq = naming.dlq_topic(naming.group_of_retry_topic(topic) or "")
                validate_topic_name(dlq)
                if self.queue_count(dlq, ensure) is None:
                    ensure[dlq] = 1
                props[P.DLQ_REASON] = DLQ_REASON_MAX_RECONSUME
                return self._make(dlq, 0, body, props, req, reconsume, 0)
        queue_id = self.pick_queue(topic, queues, req.queue_id)
        if create_retry:
            ensure[topic] = queues
        return self._make(topic, queue_id, body, props, req, reconsume, level)

    def _make(self, topic: str, queue_id: int, body: bytes, props: dict[str, str],
              req: PutRequest, reconsume: int, level: int) -> Prepared:
        delay_ms = 0
        prepared = is_transaction_prepared_or_rollback(req.sys_flag)
        if (req.deliver_at is not None or req.delay_ms is not None) and not prepared:
            return self._park_timer(topic, queue_id, body, props, req, reconsume)
        if level > 0 and not prepared:
            topic, queue_id, delay_ms = self._park(props, topic, queue_id, level)
        return Prepared.build(topic, queue_id, body, props, flag=req.flag,
                              sys_flag=req.sys_flag, born_timestamp=req.born_timestamp,
                              born_host=req.born_host, reconsume_times=reconsume,
                              delay_ms=delay_ms, max_size=self.config.segment_size_bytes)

    def timer_target(self, deliver_at: int | None, delay_ms: int | None,
                     now_ms: int | None = None) -> int:
        """The asked delivery time of a timer, checked against the cap (SPEC T1)."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        target = deliver_at if deliver_at is not None else now + (delay_ms or 0)
        cap = self.config.timer_max_delay_ms
        if target - now > cap:
            asked = "deliverAt" if deliver_at is not None else "delayMs"
            raise ValidationError(f"{asked} is {target - now} ms ahead, past the limit of "
                                  f"{cap} ms ({format_delay(cap)}, {TIMER_MAX_DELAY_VAR})",
                                  rule="T1", code="INVALID_REQUEST")
        return target

    def _park_timer(self, topic: str, queue_id: int, body: bytes, props: dict[str, str],
                    req: PutRequest | None, reconsume: int, *,
                    record: CommitLogRecord | None = None,
                    deliver_at: int | None = None) -> Prepared:
        """A timer message parked in the timer log (issue 15): ``REAL_TOPIC``/``REAL_QID``
        as S1, ``DELIVER_AT`` or ``DELAY_MS`` (the record alone gives its deliver time)."""
        props[P.REAL_TOPIC] = topic
        props[P.REAL_QID] = str(queue_id)
        for name in (P.DELAY, P.DELIVER_AT, P.DELAY_MS):
            props.pop(name, None)
        if req is not None:
            self.timer_target(req.deliver_at, req.delay_ms)
            deliver_at, delay = req.deliver_at, req.delay_ms
        else:
            delay = None
        if deliver_at is not None:
            props[P.DELIVER_AT] = str(deliver_at)
            code, delay_ms = deliver_at, -1
        else:
            props[P.DELAY_MS] = str(delay or 0)
            code, delay_ms = 0, (delay or -1)
        source = record if record is not None else req
        assert source is not None
        built = Prepared.build(naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE, body, props,
                               flag=source.flag, sys_flag=source.sys_flag,
                               born_timestamp=source.born_timestamp,
                               born_host=source.born_host, reconsume_times=reconsume,
                               max_size=self.config.segment_size_bytes)
        return built._replace(tags_code=code, delay_ms=delay_ms, mark=(PARKED_TIMER, 0))

    def reschedule(self, record: CommitLogRecord, deliver_at: int) -> Prepared:
        """A parked message (level or timer) again, as a timer due at ``deliver_at``; its
        properties (``UNIQ_KEY`` included) kept, so its msgId stays (issue 15)."""
        props = dict(record.properties)
        topic = props.get(P.REAL_TOPIC, "")
        try:
            queue_id = int(props.get(P.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        if not props.get(P.UNIQ_KEY):
            props[P.UNIQ_KEY] = record.offset_msg_id
        return self._park_timer(topic, queue_id, record.body, props, None,
                                record.reconsume_times, record=record, deliver_at=deliver_at)

    # ---- copy (internal) -----------------------------------------------------------------------
    def copy(self, req: CopyItem, record: CommitLogRecord, ensure: dict[str, int]) -> Prepared:
        topic = validate_topic_name(req.topic)
        if topic == naming.SCHEDULE_TOPIC:
            raise Forbidden(f"cannot copy into {topic}; use delay_level", rule="S3")
        queues = self.queue_count(topic, ensure)
        if queues is None:
            if not (naming.is_retry_topic(topic) or naming.is_dlq_topic(topic)):
                raise TopicNotFound(f"topic {topic} does not exist")
            queues = ensure[topic] = 1
        self.check_writable()
        level = self.levels.clamp(req.delay_level)
        queue_id = self.pick_queue(topic, queues, req.queue_id)
        props = dict(record.properties)
        props.pop(P.SCHEDULE_OFFSET, None)  # a copy hands nothing over (D9)
        if not props.get(P.UNIQ_KEY):  # a record from before unique ids: it keeps its msgId
            props[P.UNIQ_KEY] = record.offset_msg_id
        for name in req.remove_properties:
            props.pop(name, None)
        props.update(validate_properties(req.set_properties, allow_reserved=True))
        for name, entry in req.append_properties.items():
            props[name] = P.append_to_list(props.get(name), _json_entry(name, entry))
            validate_properties({name: props[name]}, allow_reserved=True)
        reconsume = record.reconsume_times if req.reconsume_times is None else req.reconsume_times
        delay_ms = 0
        if level > 0 and not is_transaction_prepared_or_rollback(record.sys_flag):
            topic, queue_id, delay_ms = self._park(props, topic, queue_id, level)
        return Prepared.build(topic, queue_id, record.body, props, flag=record.flag,
                              sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
                              born_host=record.born_host, reconsume_times=reconsume,
                              delay_ms=delay_ms, max_size=self.config.segment_size_bytes)


def _json_entry(name: str, entry: str) -> object:
    """One entry of a copy's ``append_properties``: the JSON value the text holds, or the text
    itself when it is not JSON (the OpenAPI document says "a string"; nothing to refuse)."""
    try:
        return json.loads(entry)
    except ValueError:
        return entry


def retry_counts(props: dict[str, str], reconsume: int, default_max: int) -> tuple[int, int]:
    """R10: (reconsumeTimes, maxReconsumeTimes) of a plain send to a %RETRY% topic; the max
    absent or -1 is ``default_max`` (the group's retryMaxTimes, else 16)."""
    try:
        if P.RECONSUME_TIME in props:
            reconsume = int(props[P.RECONSUME_TIME])
        asked = props.get(P.MAX_RECONSUME_TIMES)
        max_times = max_reconsume_times_or(None if asked in (None, "") else int(asked),
                                           default_max)
    except ValueError as exc:
        raise ValidationError(f"{P.RECONSUME_TIME}/{P.MAX_RECONSUME_TIMES} must be whole "
                              f"numbers: {exc}", rule="R10", code="INVALID_PROPERTIES") from exc
    return reconsume, max_times
