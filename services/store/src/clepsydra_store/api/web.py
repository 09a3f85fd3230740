"""Flask helpers the blueprints share: JSON responses, the request's JSON object, views of
engine values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Response, request

from clepsydra_core.errors import ValidationError
from clepsydra_core.records import CommitLogRecord, message_to_json
from clepsydra_store.api.observability import DESTINATION, set_attribute
from clepsydra_store.engine.types import TopicInfo
from clepsydra_web.jsonio import JSON_TYPE, dumps, loads_object


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status=status, mimetype=JSON_TYPE)


def request_object() -> dict[str, Any]:
    """The request body as a JSON object (400 INVALID_JSON otherwise; 413 over the limit)."""
    return loads_object(request.get_data(cache=False))


def topic_json(info: TopicInfo) -> dict[str, Any]:
    return {"name": info.name, "system": info.system,
            "queues": [{"queueId": q.queue_id, "minOffset": q.min_offset,
                        "maxOffset": q.max_offset} for q in info.queues]}


def with_body_arg(args: Mapping[str, str]) -> bool:
    """``?body=false``: headers only, the body left out of the answer; ``true`` (or absent):
    with it. Anything else is a 400 (the documents say boolean; issue 12.10)."""
    raw = args.get("body", "true")
    if raw not in ("true", "false"):
        raise ValidationError(f"query parameter body={raw!r} must be true or false",
                              code="INVALID_REQUEST")
    return raw == "true"


def messages_json(records: list[CommitLogRecord], with_body: bool = True) -> list[dict[str, Any]]:
    return [message_to_json(r, with_body=with_body) for r in records]


def trace_topic(topic: str) -> None:
    """Name the topic on the request span (messaging.destination.name)."""
    set_attribute(DESTINATION, topic)
