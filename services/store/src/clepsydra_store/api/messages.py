"""Messages: look-ups by msgId, by key and by CommitLog offset (the produce handlers are
``produce.py``'s)."""

from __future__ import annotations

from clepsydra_core import validation
from clepsydra_core.errors import ValidationError
from clepsydra_core.msgid import check_id
from clepsydra_core.wire.messages import DEFAULT_PULL, MAX_PULL
from clepsydra_store.api.answers import messages_json, with_body_arg
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.fanout import looked_up
from clepsydra_store.api.observability import MESSAGE_ID, set_attribute
from clepsydra_web import jsonio

MAX_KEY_RESULTS = MAX_PULL


@looked_up
def get_message(c: StoreContext, call: Call) -> Reply:
    """``{messages: [...]}``: every copy of the message whose msgId (unique id) or
    offsetMsgId this is, oldest first (docs/contracts.md); 404 MESSAGE_NOT_FOUND."""
    msg_id = call.args["msgId"]
    check_id(msg_id)
    set_attribute(MESSAGE_ID, msg_id)
    return 200, {"messages": messages_json(c.store.get_by_msg_id(msg_id))}


@looked_up
def find_messages(c: StoreContext, call: Call) -> Reply:
    """``?topic=&key=[&max=]`` -> ``{messages: [...]}`` (KEYS or UNIQ_KEY match)."""
    topic = validation.validate_topic_name(call.query.get("topic"))
    key = call.query.get("key")
    if not key:
        raise ValidationError("query parameter key is required", code="INVALID_REQUEST")
    max_count = jsonio.query_int(call.query, "max", DEFAULT_PULL, minimum=1,
                                 maximum=MAX_KEY_RESULTS)
    trace_topic(topic)
    c.store.get_topic(topic)
    return 200, {"messages": messages_json(c.store.get_by_key(topic, key, max_count))}


def get_commitlog(c: StoreContext, call: Call) -> Reply:
    """The message whose record starts at a CommitLog offset; ``?body=false`` leaves the body
    out (headers only)."""
    commitlog_offset = jsonio.path_int(call.args["offset"], "commitLogOffset")
    record = c.store.get_by_commitlog_offset(commitlog_offset)
    set_attribute(MESSAGE_ID, record.msg_id)
    return 200, messages_json([record], with_body_arg(call.query))[0]
