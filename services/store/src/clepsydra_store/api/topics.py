"""Topics: create (201, 200 when it exists alike, 409 when it exists with other queues), list,
show with per-queue min/max offsets, update the queue count (A1) and delete (A2); system topics
are the store's own (S3)."""

from __future__ import annotations

from clepsydra_core import naming, validation
from clepsydra_core.errors import ClepsydraError, Forbidden, TopicNotFound
from clepsydra_core.runtime.http import Json
from clepsydra_core.wire.topics import TopicCreate, TopicDeleted, TopicUpdate
from clepsydra_store.api.answers import topic_json
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.fanout import everywhere, now_ms
from clepsydra_store.cluster import Cluster


def _created(cluster: Cluster, _call: Call, answer: Json | None) -> None:
    """A topic made (again) through a shard is no longer one it deleted (cluster/state.py)."""
    if answer is not None and isinstance(answer.get("name"), str):
        cluster.state.forget_deleted(answer["name"])


def _deleted(cluster: Cluster, call: Call, _answer: Json | None) -> None:
    """A topic deleted through a shard: it never takes it back from a peer (cluster/sync.py)."""
    cluster.state.mark_deleted(call.args["topic"], now_ms())


class TopicConflict(ClepsydraError):
    """A topic is created again with a different number of queues."""

    code = "TOPIC_CONFLICT"
    http_status = 409


def create(c: StoreContext, call: Call, *, system: bool) -> Reply:
    """Shared by POST /v1/topics and the internal route (system topics)."""
    c.require_writable()
    asked = TopicCreate.from_json(call.json(), what="topic", strict=True)
    name = validation.validate_topic_name(asked.name)
    queues = asked.queues
    trace_topic(name)
    if system:
        if not (naming.is_retry_topic(name) or naming.is_dlq_topic(name)):
            raise Forbidden(f"the internal route creates only %RETRY% and %DLQ% topics, not "
                            f"{name!r}; use POST /v1/topics", rule="S3")
    elif naming.is_system_topic(name):
        raise Forbidden(f"cannot create system topic {name!r}", rule="S3")
    try:
        existing = c.store.get_topic(name)
    except TopicNotFound:
        existing = None
    if existing is not None and len(existing.queues) != queues:
        raise TopicConflict(f"topic {name!r} exists with {len(existing.queues)} queues, "
                            f"not {queues}")
    info, created = c.store.create_topic(name, queues, system=system)
    return (201 if created else 200), topic_json(info)


@everywhere(_created)
def create_topic(c: StoreContext, call: Call) -> Reply:
    return create(c, call, system=False)


def list_topics(c: StoreContext, call: Call) -> Reply:
    topics = sorted(c.store.list_topics(), key=lambda t: t.name)
    return 200, {"topics": [topic_json(t) for t in topics]}


def get_topic(c: StoreContext, call: Call) -> Reply:
    topic = call.args["topic"]
    validation.validate_topic_name(topic)
    trace_topic(topic)
    return 200, topic_json(c.store.get_topic(topic))


@everywhere(_created)
def update_topic(c: StoreContext, call: Call) -> Reply:
    """``{queues}``: grow (new empty queues) or shrink (refused while a hidden queue holds
    unconsumed messages, 409 TOPIC_NOT_DRAINED); 200 with the topic as it now is (A1). A
    missing topic is created (201), as RocketMQ's updateTopic does."""
    topic = call.args["topic"]
    c.require_writable()
    validation.validate_topic_name(topic)
    trace_topic(topic)
    queues = TopicUpdate.from_json(call.json(), what="topic update", strict=True).queues
    try:
        return 200, topic_json(c.store.update_topic(topic, queues))
    except TopicNotFound:
        info, created = c.store.create_topic(topic, queues)
        return (201 if created else 200), topic_json(info)


@everywhere(_deleted)
def delete_topic(c: StoreContext, call: Call) -> Reply:
    """200 ``{name, deleted: true}``; 404 when absent; 403 for a system topic (S3, A2)."""
    topic = call.args["topic"]
    c.require_writable()
    validation.validate_topic_name(topic)
    trace_topic(topic)
    if not c.store.delete_topic(topic):
        raise TopicNotFound(f"topic {topic} does not exist")
    return 200, TopicDeleted(topic, True).to_json()
