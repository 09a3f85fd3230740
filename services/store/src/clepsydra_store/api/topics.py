"""Topics: create (201, 200 when it exists alike, 409 when it exists with other queues), list,
show with per-queue min/max offsets."""

from __future__ import annotations

from flask import Blueprint, Response

from clepsydra_core import naming, validation
from clepsydra_core.errors import ClepsydraError, Forbidden, TopicNotFound
from clepsydra_core.wire.topics import TopicCreate
from clepsydra_store.api.context import StoreContext, ctx
from clepsydra_store.api.web import json_response, request_object, topic_json, trace_topic

bp = Blueprint("topics", __name__)



class TopicConflict(ClepsydraError):
    """A topic is created again with a different number of queues."""

    code = "TOPIC_CONFLICT"
    http_status = 409


def create(c: StoreContext, *, system: bool) -> Response:
    """Shared by POST /v1/topics and the internal route (system topics)."""
    c.require_writable()
    asked = TopicCreate.from_json(request_object(), what="topic", strict=True)
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
    return json_response(topic_json(info), 201 if created else 200)


@bp.post("/v1/topics")
def create_topic() -> Response:
    return create(ctx(), system=False)


@bp.get("/v1/topics")
def list_topics() -> Response:
    topics = sorted(ctx().store.list_topics(), key=lambda t: t.name)
    return json_response({"topics": [topic_json(t) for t in topics]})


@bp.get("/v1/topics/<topic>")
def get_topic(topic: str) -> Response:
    validation.validate_topic_name(topic)
    trace_topic(topic)
    return json_response(topic_json(ctx().store.get_topic(topic)))
