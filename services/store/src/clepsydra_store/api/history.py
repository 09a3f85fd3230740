"""A message's lifecycle timeline, ``GET /v1/messages/{msgId}/history`` (DEC-message-history):
every stored copy of the message (the look-up by msgId), the committed offsets of the groups
on the topics that hold them, and the state of each parked copy, read through the store's facade
and turned into hops by :func:`clepsydra_core.history.build`."""

from __future__ import annotations

from clepsydra_core import history, naming
from clepsydra_core.msgid import check_id
from clepsydra_core.records import CommitLogRecord
from clepsydra_core.wire.history import CANCELLED, MessageHistory
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_store.api.answers import PARKED_STATES, messages_json
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply
from clepsydra_store.api.fanout import found_where
from clepsydra_store.api.observability import MESSAGE_ID, set_attribute
from clepsydra_store.engine.message_store import MAX_COPIES


def _offsets(c: StoreContext, records: list[CommitLogRecord]) -> history.Offsets:
    """group -> topic -> queueId -> committed offset, on the topics that hold a copy."""
    offsets: dict[str, dict[str, dict[int, int]]] = {}
    for topic in sorted({r.topic for r in records}):
        if naming.is_dlq_topic(topic) or topic in (naming.SCHEDULE_TOPIC, naming.TIMER_TOPIC):
            continue  # nobody consumes these (R16, S3)
        for group, queues in c.store.topic_offsets(topic).items():
            offsets.setdefault(group, {})[topic] = queues
    return offsets


@found_where
def get_history(c: StoreContext, call: Call) -> Reply:
    """:class:`~clepsydra_core.wire.history.MessageHistory`; 404 MESSAGE_NOT_FOUND."""
    msg_id = call.args["msgId"]
    check_id(msg_id)
    set_attribute(MESSAGE_ID, msg_id)
    return 200, message_history(c, msg_id).to_json()


def message_history(c: StoreContext, msg_id: str) -> MessageHistory:
    """The timeline of the message whose msgId or copy's offsetMsgId ``msg_id`` is;
    MessageNotFound when the store holds no copy of it."""
    records = c.store.get_by_msg_id(msg_id)
    copies = [StoredMessage.from_json(m) for m in messages_json(records, with_body=False)]
    parked = {offset: PARKED_STATES[state]
              for offset, state in c.store.parked_states(records).items()}
    cancelled = [r for r in records if parked.get(r.commitlog_offset) == CANCELLED]
    return history.build(history.Inputs(
        msg_id=msg_id, copies=copies, offsets=_offsets(c, records), parked=parked,
        cancelled_at=c.store.cancel_times(cancelled) if cancelled else {},
        delay_ms=c.settings.common.delay_levels.delay_ms,
        complete=len(records) < MAX_COPIES))
