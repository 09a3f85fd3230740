"""Consumer groups: their settings (R3, R5), committed progress (offsets) and live consumers
(heartbeats, C1, C5).

The store is the durable owner of group settings (the retry service reads them through a Redis
cache). Offsets and heartbeats do not need a group to have settings, so a group that has
committed nothing answers an empty ``offsets`` object rather than a 404.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

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
from clepsydra_store.api.context import StoreContext, ctx
from clepsydra_store.api.fanout import everywhere
from clepsydra_store.api.web import json_response, trace_topic
from clepsydra_store.consumers import CLUSTERING, GroupView
from clepsydra_web import jsonio

bp = Blueprint("groups", __name__)



def _settings_answer(group: str, settings: GroupSettings) -> GroupSettingsAnswer:
    return GroupSettingsAnswer(group, settings.retry_queue_nums, settings.retry_max_times)


@bp.get("/v1/groups")
def list_groups() -> Response:
    """``{groups: [{group, retryQueueNums, retryMaxTimes}]}``: every group with settings."""
    return json_response(GroupSettingsList([
        _settings_answer(group, settings)
        for group, settings in ctx().store.all_group_settings().items()]).to_json())


@bp.put("/v1/groups/<group>/settings")
@everywhere()
def put_group_settings(group: str) -> Response:
    """Create (201) or change (200) a group's settings, durably; fields not given keep their
    current value (or the default)."""
    validation.validate_group_name(group)
    raw = request.get_data(cache=False)
    body = jsonio.loads_object(raw) if raw.strip() else {}
    settings, created = ctx().store.put_group_settings(group, body)
    return json_response(_settings_answer(group, settings).to_json(), 201 if created else 200)


@bp.get("/v1/groups/<group>/settings")
def get_group_settings(group: str) -> Response:
    validation.validate_group_name(group)
    settings = ctx().store.group_settings(group)
    if settings is None:
        raise GroupNotFound(f"consumer group {group!r} does not exist", rule="R2")
    return json_response(_settings_answer(group, settings).to_json())


@bp.put("/v1/groups/<group>/offsets")
def commit_offset(group: str) -> Response:
    validation.validate_group_name(group)
    commit = OffsetCommit.from_json(jsonio.loads_object(request.get_data(cache=False)),
                                    what="offset commit", strict=True)
    topic = validation.validate_topic_name(commit.topic)
    validation.check_consumable(topic)
    queue_id, queue_offset = commit.queue_id, commit.offset
    trace_topic(topic)
    store = ctx().store
    info = store.get_topic(topic)
    queue = next((q for q in info.queues if q.queue_id == queue_id), None)
    if queue is None:
        raise OffsetOutOfRange(f"topic {topic!r} has queues 0..{len(info.queues) - 1}, "
                               f"not {queue_id}")
    if queue_offset > queue.max_offset:
        raise OffsetOutOfRange(f"offset {queue_offset} is past the end of {topic!r} queue "
                               f"{queue_id} (maxOffset {queue.max_offset})")
    store.commit_offset(group, topic, queue_id, queue_offset)
    return json_response(OffsetCommitted(group, topic, queue_id, queue_offset).to_json())


@bp.get("/v1/groups/<group>/offsets")
def get_offsets(group: str) -> Response:
    """``{group, offsets: {topic: {queueId: offset}}}`` (queue ids as JSON object keys)."""
    validation.validate_group_name(group)
    topic = request.args.get("topic")
    if topic is not None:  # given empty: not a topic (P1)
        validation.validate_topic_name(topic)
    offsets = ctx().store.group_offsets(group, topic)
    return json_response(GroupOffsets(group, {
        t: {str(q): o for q, o in sorted(queues.items())} for t, queues in sorted(offsets.items())
    }).to_json())


def _view_json(view: GroupView, detailed: bool) -> dict[str, Any]:
    if not detailed:
        return HeartbeatAnswer(view.client_ids(), view.consistent, view.mismatches).to_json()
    return Consumers(view.group, [c.info() for c in view.consumers], view.consistent,
                          view.mismatches).to_json()


@bp.post("/v1/groups/<group>/heartbeat")
def heartbeat(group: str) -> Response:
    """Register or refresh a consumer; ``{consumers: [clientId...], consistent}`` (C1, C5)."""
    validation.validate_group_name(group)
    beat = Heartbeat.from_json(jsonio.loads_object(request.get_data(cache=False)),
                               what="heartbeat", strict=True)
    client_id = beat.client_id
    subscriptions = beat.subscriptions or {}
    for topic in subscriptions:
        validation.validate_topic_name(topic)
        if topic == SCHEDULE_TOPIC:
            raise Forbidden(f"consumers can never subscribe to {topic}", rule="S3")
    model = beat.message_model or CLUSTERING
    c = ctx()
    view = c.consumers.heartbeat(group, client_id, subscriptions, model)
    if c.settings.common.auto_create_groups and c.store.group_settings(group) is None:
        c.store.put_group_settings(group, {})  # first seen: created with defaults (12.2)
    if model == CLUSTERING and c.cluster is not None and c.cluster.clustered:
        _ensure_retry_topic(c, group, subscriptions)
    return json_response(_view_json(view, detailed=False))


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


@bp.get("/v1/groups/<group>/consumers")
def list_consumers(group: str) -> Response:
    validation.validate_group_name(group)
    return json_response(_view_json(ctx().consumers.view(group), detailed=True))


@bp.delete("/v1/groups/<group>/consumers/<client_id>")
def unregister_consumer(group: str, client_id: str) -> Response:
    """A consumer leaving at shutdown; ``{removed: bool}`` (false if it was not registered)."""
    validation.validate_group_name(group)
    removed = ctx().consumers.unregister(group, client_id)
    return json_response(ConsumerRemoved(removed).to_json())
