"""Messages: produce one or a batch (the Flask twins of the fast path), and look-ups by msgId,
by key and by CommitLog offset."""

from __future__ import annotations

from flask import Blueprint, Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from clepsydra_core import validation
from clepsydra_core.errors import ValidationError
from clepsydra_core.msgid import check_id
from clepsydra_core.wire.messages import DEFAULT_PULL, MAX_PULL
from clepsydra_store.api import produce
from clepsydra_store.api.context import ctx
from clepsydra_store.api.fanout import looked_up
from clepsydra_store.api.observability import MESSAGE_ID, set_attribute
from clepsydra_store.api.web import json_response, messages_json, trace_topic, with_body_arg
from clepsydra_web import jsonio

bp = Blueprint("messages", __name__)

MAX_KEY_RESULTS = MAX_PULL
SELF_TRACED = frozenset({"messages.produce_message", "messages.produce_batch"})
"""Endpoints that start their own span (the span's parent may come from the message)."""


def _serve_produce(topic: str, batch: bool) -> Response:
    try:
        raw: bytes | None = request.get_data(cache=False)
    except RequestEntityTooLarge:
        raw = None
    status, body = produce.serve(ctx(), request.environ, topic, raw, batch)
    return Response(body, status=status, mimetype=jsonio.JSON_TYPE)


@bp.post("/v1/topics/<topic>/messages")
def produce_message(topic: str) -> Response:
    return _serve_produce(topic, batch=False)


@bp.post("/v1/topics/<topic>/messages/batch")
def produce_batch(topic: str) -> Response:
    return _serve_produce(topic, batch=True)


@bp.get("/v1/messages/<msg_id>")
@looked_up
def get_message(msg_id: str) -> Response:
    """``{messages: [...]}``: every copy of the message whose msgId (unique id) or
    offsetMsgId this is, oldest first (docs/contracts.md, issue 20.4); 404
    MESSAGE_NOT_FOUND."""
    check_id(msg_id)
    set_attribute(MESSAGE_ID, msg_id)
    records = ctx().store.get_by_msg_id(msg_id)
    return json_response({"messages": messages_json(records)})


@bp.get("/v1/messages")
@looked_up
def find_messages() -> Response:
    """``?topic=&key=[&max=]`` -> ``{messages: [...]}`` (KEYS or UNIQ_KEY match)."""
    topic = validation.validate_topic_name(request.args.get("topic"))
    key = request.args.get("key")
    if not key:
        raise ValidationError("query parameter key is required", code="INVALID_REQUEST")
    max_count = jsonio.query_int(request.args, "max", DEFAULT_PULL, minimum=1,
                                 maximum=MAX_KEY_RESULTS)
    trace_topic(topic)
    store = ctx().store
    store.get_topic(topic)
    records = store.get_by_key(topic, key, max_count)
    return json_response({"messages": messages_json(records)})


@bp.get("/v1/commitlog/<offset>")
def get_commitlog(offset: str) -> Response:
    """The message whose record starts at a CommitLog offset; ``?body=false`` leaves the body
    out (headers only)."""
    commitlog_offset = jsonio.path_int(offset, "commitLogOffset")
    record = ctx().store.get_by_commitlog_offset(commitlog_offset)
    set_attribute(MESSAGE_ID, record.msg_id)
    return json_response(messages_json([record], with_body_arg(request.args))[0])
