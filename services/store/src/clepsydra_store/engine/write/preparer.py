"""The checks of the write path and the records of copies and reschedules, all done before the
writer lock is taken: a produce target's checks (P1 name, S3, existence, the %RETRY% topic a
send creates, R2), the naming of a produce request the encoder refused (:meth:`Preparer.refuse`:
the same errors, in the same order, as the encoder's checks), and the records of the retry
service's copies (R3-R8, R16) and of a reschedule (T2), placed by ``routing.py``'s parks.
Offsets and the store timestamp are filled in under the lock by the writer."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import NoReturn

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    Forbidden,
    NoPermission,
    StoreError,
    TopicNotFound,
    ValidationError,
)
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import UniqIds, uniq_prefix
from clepsydra_core.records import CommitLogRecord, is_transaction_prepared_or_rollback
from clepsydra_core.validation import (
    check_producible,
    validate_body,
    validate_properties,
    validate_text,
    validate_topic_name,
)
from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.meta.group_settings import GroupSettingsRegistry
from clepsydra_store.engine.meta.topics import TopicRegistry
from clepsydra_store.engine.types import CopyRequest, PutRequest
from clepsydra_store.engine.write.codec import Prepared
from clepsydra_store.engine.write.routing import (
    Router,
    Target,
    apply,
    keep_uniq_key,
    park_at_level,
    park_timer,
    pick_queue,
    route,
    timer_target,
)


class Preparer:
    def __init__(self, config: EngineConfig, topics: TopicRegistry,
                 group_settings: GroupSettingsRegistry) -> None:
        self.config = config
        self.levels: DelayLevels = config.delay_levels
        self.topics = topics
        self.group_settings = group_settings
        """Consumer groups' settings (R3, R5 for %RETRY%)."""
        self._rr: dict[str, Iterator[int]] = {}
        self.ids = UniqIds(uniq_prefix(config.store_host.rpartition(":")[0]))
        """The unique ids (msgIds) the store gives messages whose producer gave none."""
        self.routers: dict[Target, tuple[Target, bytes, Router]] = {}
        """The produce encoder's ``TargetFields`` of each target it met: the target, its
        topic's ``topic_field`` and its ``routing.router`` (a target names its topic's queue
        count, counter and %RETRY% settings: a change makes a new one)."""

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

    def check_writable(self) -> None:
        if not self.config.writable:
            raise NoPermission("the store does not accept writes now", rule="R2")

    # ---- produce -----------------------------------------------------------------------
    def check_topic(self, topic: str, ensure: dict[str, int]) -> tuple[int, bool]:
        """(queues, auto-create as %RETRY%) of a produce target (P1, S3, existence)."""
        validate_topic_name(topic)
        check_producible(topic)
        queues = self.queue_count(topic, ensure)
        if queues is not None:
            return queues, False
        if not naming.is_retry_topic(topic):
            raise TopicNotFound(f"topic {topic} does not exist")
        group = self.group_settings.get(naming.group_of_retry_topic(topic) or "")
        if group is not None and group.retry_queue_nums > 0:  # R3: the group's count
            return group.retry_queue_nums, True
        return self.config.retry_topic_queues, True

    def refuse(self, req: PutRequest, target: Target, now_ms: int) -> NoReturn:
        """Raise the error that names why the produce encoder refused ``req`` (P1's checks of
        its body, properties, tags and keys, then its placement's: L2, R10, T1, its queue); the
        encoder's checks are the plain form of these, in the same order."""
        body = req.body
        if type(body) is not bytes:
            raise ValidationError("body must be bytes", rule="P1", code="INVALID_REQUEST")
        validate_body(body, self.config.max_body_bytes)
        validate_properties(req.properties)
        validate_text(req.tags, "tags")
        validate_text(req.keys, "keys")
        route(req, target, self.levels, now_ms, self.config.timer_max_delay_ms, self.ids.new)
        raise StoreError(f"the produce encoder refused a message to {req.topic} that no check "
                         "refuses")

    def timer_target(self, deliver_at: int | None, delay_ms: int | None, now_ms: int) -> int:
        """A reschedule's asked time, checked against the cap (T1)."""
        return timer_target(deliver_at, delay_ms, now_ms, self.config.timer_max_delay_ms)

    def reschedule(self, record: CommitLogRecord, deliver_at: int) -> Prepared:
        """A parked message (level or timer) again, as a timer due at ``deliver_at``; its
        properties (``UNIQ_KEY`` included) kept, so its msgId stays (T2)."""
        props = keep_uniq_key(dict(record.properties), record.offset_msg_id)
        try:
            queue_id = int(props.get(P.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        placed = park_timer(props.get(P.REAL_TOPIC, ""), queue_id, deliver_at, None,
                            record.reconsume_times)
        topic, queue_id, _, _, code, delay_ms, mark, reconsume, _, _ = placed
        return Prepared.build(topic, queue_id, record.body, apply(placed, props),
                              flag=record.flag, sys_flag=record.sys_flag,
                              born_timestamp=record.born_timestamp, born_host=record.born_host,
                              reconsume_times=reconsume, code=code, delay_ms=delay_ms,
                              mark=mark, max_size=self.config.segment_size_bytes)

    # ---- copy (internal) -------------------------------------------------------------------
    def copy(self, req: CopyRequest, record: CommitLogRecord,
             ensure: dict[str, int]) -> Prepared:
        topic = validate_topic_name(req.topic)
        if topic == naming.SCHEDULE_TOPIC:
            raise Forbidden(f"cannot copy into {topic}; use delay_level", rule="S3")
        queues = self.queue_count(topic, ensure)
        if queues is None:
            if not (naming.is_retry_topic(topic) or naming.is_dlq_topic(topic)):
                raise TopicNotFound(f"topic {topic} does not exist")
            queues = ensure[topic] = 1
        self.check_writable()
        level = self.levels.clamp(req.delay_level)  # L2
        queue_id = next(self.round_robin(topic)) % queues if req.queue_id is None else \
            pick_queue(topic, queues, req.queue_id)
        props = dict(record.properties)
        props.pop(P.SCHEDULE_OFFSET, None)  # a copy hands nothing over (D9)
        keep_uniq_key(props, record.offset_msg_id)
        for name in req.remove_properties:
            props.pop(name, None)
        props.update(validate_properties(req.set_properties, allow_reserved=True))
        for name, entry in req.append_properties.items():
            props[name] = P.append_to_list(props.get(name), _json_entry(name, entry))
            validate_properties({name: props[name]}, allow_reserved=True)
        reconsume = record.reconsume_times if req.reconsume_times is None else req.reconsume_times
        code, delay_ms = None, 0
        if level > 0 and not is_transaction_prepared_or_rollback(record.sys_flag):
            placed = park_at_level(topic, queue_id, level, self.levels, reconsume)
            apply(placed, props)
            topic, queue_id, _, _, code, delay_ms, *_ = placed
        return Prepared.build(topic, queue_id, record.body, props, flag=record.flag,
                              sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
                              born_host=record.born_host, reconsume_times=reconsume,
                              code=code, delay_ms=delay_ms,
                              max_size=self.config.segment_size_bytes)


def _json_entry(name: str, entry: str) -> object:
    """One entry of a copy's ``append_properties``: the JSON value the text holds, or the text
    itself when it is not JSON (the OpenAPI document says "a string"; nothing to refuse)."""
    try:
        return json.loads(entry)
    except ValueError:
        return entry
