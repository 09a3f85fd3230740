"""Consumer groups: their settings (R3, R5), committed progress (offsets) and live consumers
(heartbeats, C1, C5).

The store is the durable owner of group settings (the retry service reads them through a Redis
cache). Offsets and heartbeats do not need a group to have settings, so a group that has
committed nothing answers an empty ``offsets`` object rather than a 404.
"""

from __future__ import annotations

from typing import Any

from clepsydra_core import naming, validation
from clepsydra_core.errors import Forbidden, GroupNotFound, OffsetOutOfRange, TopicNotFound
from clepsydra_core.groups import GroupSettings
from clepsydra_core.naming import SCHEDULE_TOPIC
from clepsydra_core.wire.groups import (
    ConsumerRemoved,
    Consumers,
    GroupOffsets,
    GroupSettingsAnswer,
    GroupSettingsList,
    Heartbeat,
    HeartbeatAnswer,
    OffsetCommit,
    OffsetCommitted,
)
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.fanout import everywhere
from clepsydra_store.consumers import CLUSTERING, GroupView
from clepsydra_web import jsonio


def _settings_answer(group: str, settings: GroupSettings) -> GroupSettingsAnswer:
    return GroupSettingsAnswer(group, settings.retry_queue_nums, settings.retry_max_times)


def list_groups(c: StoreContext, call: Call) -> Reply:
    """``{groups: [{group, retryQueueNums, retryMaxTimes}]}``: every group with settings."""
    return 200, GroupSettingsList([
        _settings_answer(group, settings)
        for group, settings in c.store.all_group_settings().items()]).to_json()


@everywhere()
def put_group_settings(c: StoreContext, call: Call) -> Reply:
    """Create (201) or change (200) a group's settings, durably; fields not given keep their
    current value (or the default)."""
    group = call.args["group"]
    validation.validate_group_name(group)
    raw = call.body()
    body = jsonio.loads_object_or_empty(raw)
    settings, created = c.store.put_group_settings(group, body)
    return (201 if created else 200), _settings_answer(group, settings).to_json()


def get_group_settings(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    settings = c.store.group_settings(group)
    if settings is None:
        raise GroupNotFound(f"consumer group {group!r} does not exist", rule="R2")
    return 200, _settings_answer(group, settings).to_json()


def commit_offset(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    commit = OffsetCommit.from_json(call.json(), what="offset commit", strict=True)
    topic = validation.validate_topic_name(commit.topic)
    validation.check_consumable(topic)
    queue_id, queue_offset = commit.queue_id, commit.offset
    trace_topic(topic)
    store = c.store
    info = store.get_topic(topic)
    queue = next((q for q in info.queues if q.queue_id == queue_id), None)
    if queue is None:
        raise OffsetOutOfRange(f"topic {topic!r} has queues 0..{len(info.queues) - 1}, "
                               f"not {queue_id}")
    if queue_offset > queue.max_offset:
        raise OffsetOutOfRange(f"offset {queue_offset} is past the end of {topic!r} queue "
                               f"{queue_id} (maxOffset {queue.max_offset})")
    store.commit_offset(group, topic, queue_id, queue_offset)
    return 200, OffsetCommitted(group, topic, queue_id, queue_offset).to_json()


def get_offsets(c: StoreContext, call: Call) -> Reply:
    """``{group, offsets: {topic: {queueId: offset}}}`` (queue ids as JSON object keys)."""
    group = call.args["group"]
    validation.validate_group_name(group)
    topic = call.query.get("topic")
    if topic is not None:  # given empty: not a topic (P1)
        validation.validate_topic_name(topic)
    offsets = c.store.group_offsets(group, topic)
    return 200, GroupOffsets(group, {
        t: {str(q): o for q, o in sorted(queues.items())} for t, queues in sorted(offsets.items())
    }).to_json()


def _view_json(view: GroupView, detailed: bool) -> dict[str, Any]:
    if not detailed:
        return HeartbeatAnswer(view.client_ids(), view.consistent, view.mismatches).to_json()
    return Consumers(view.group, [c.info() for c in view.consumers], view.consistent,
                          view.mismatches).to_json()


def heartbeat(c: StoreContext, call: Call) -> Reply:
    """Register or refresh a consumer; ``{consumers: [clientId...], consistent}`` (C1, C5)."""
    group = call.args["group"]
    validation.validate_group_name(group)
    beat = Heartbeat.from_json(call.json(), what="heartbeat", strict=True)
    client_id = beat.client_id
    subscriptions = beat.subscriptions or {}
    for topic in subscriptions:
        validation.validate_topic_name(topic)
        if topic == SCHEDULE_TOPIC:
            raise Forbidden(f"consumers can never subscribe to {topic}", rule="S3")
    model = beat.message_model or CLUSTERING
    view = c.consumers.heartbeat(group, client_id, subscriptions, model)
    if c.settings.common.auto_create_groups and c.store.group_settings(group) is None:
        c.store.put_group_settings(group, {})  # first seen: created with defaults
    if model == CLUSTERING and c.cluster is not None and c.cluster.clustered:
        _ensure_retry_topic(c, group, subscriptions)
    return 200, _view_json(view, detailed=False)


def _ensure_retry_topic(c: StoreContext, group: str, subscriptions: dict[str, str]) -> None:
    """With more than one store shard, a clustering consumer's heartbeat makes its group's
    ``%RETRY%`` topic on every shard it reaches (R3, with the group's retryQueueNums), as
    RocketMQ's brokers do at a heartbeat: the topic's route then lists every shard's retry
    queues from the start, so a retry stored on any shard is pulled without waiting for the
    consumers' next route read (DEC-store-shards)."""
    topic = naming.retry_topic(group)
    if topic not in subscriptions:
        return
    try:
        c.store.get_topic(topic)
        return
    except TopicNotFound:
        pass
    settings = c.store.group_settings(group)
    queues = settings.retry_queue_nums if settings is not None else 1
    if queues > 0 and c.cluster is not None and c.cluster.accepting:
        c.store.create_topic(topic, queues, system=True)


def list_consumers(c: StoreContext, call: Call) -> Reply:
    group = call.args["group"]
    validation.validate_group_name(group)
    return 200, _view_json(c.consumers.view(group), detailed=True)


def unregister_consumer(c: StoreContext, call: Call) -> Reply:
    """A consumer leaving at shutdown; ``{removed: bool}`` (false if it was not registered)."""
    group = call.args["group"]
    validation.validate_group_name(group)
    removed = c.consumers.unregister(group, call.args["clientId"])
    return 200, ConsumerRemoved(removed).to_json()
