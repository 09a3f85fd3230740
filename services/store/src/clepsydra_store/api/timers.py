"""Timer messages' routes (SPEC T1-T2): cancel and reschedule a pending delayed
message by msgId or by key, the timer backlog, and the scheduler's timer hand-over.

Cancel and reschedule need the producer's right (``SEND``) on the message's topic: the route
table asks for ``SEND`` (contract.py), and the handler checks it on the real topic once the
message is found (a msgId or a query string names no topic the guard could read).
"""

from __future__ import annotations

import time

from clepsydra_core import naming, validation
from clepsydra_core import properties as P
from clepsydra_core.auth import Action
from clepsydra_core.errors import MessageNotFound, ValidationError
from clepsydra_core.msgid import check_id
from clepsydra_core.records import CommitLogRecord
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.timers import (
    KeyCancelled,
    KeyRescheduled,
    MessageCancelled,
    MessageRescheduled,
    RescheduleRequest,
    TimerHandoverRequest,
)
from clepsydra_store.api.answers import FATES, timer_backlog_answer, timer_handover_answer
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.fanout import changed
from clepsydra_store.api.handover import deliver_spans
from clepsydra_store.api.observability import MESSAGE_ID, set_attribute
from clepsydra_store.engine.types import TIMER_LEVEL, Outcome
from clepsydra_web import jsonio
from clepsydra_web.tracing import idle

TIMER_LABEL = "timer"
"""The ``level`` label of timer figures in the store's metrics."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_send(c: StoreContext, call: Call, topics: set[str]) -> None:
    """The caller may send to every topic the messages belong to (access control)."""
    if c.guard is None:
        return
    header = call.header("HTTP_AUTHORIZATION")
    for topic in sorted(topics):
        c.guard.check(header, Action.SEND, topic)


def _topics(copies: dict[str, list[CommitLogRecord]]) -> set[str]:
    return {r.properties.get(P.REAL_TOPIC) or r.topic
            for records in copies.values() for r in records
            if r.topic not in (naming.TIMER_TOPIC, naming.SCHEDULE_TOPIC)
            or r.properties.get(P.REAL_TOPIC)}


def _target(c: StoreContext, call: Call) -> int:
    """The reschedule body's delivery time, checked against the cap (T1)."""
    asked = RescheduleRequest.from_json(call.json(), what="reschedule", strict=True)
    return c.store.timer_target(asked.deliver_at, asked.delay_ms)


def _act(c: StoreContext, call: Call, copies: dict[str, list[CommitLogRecord]],
         deliver_at: int | None) -> Outcome:
    c.require_writable()
    _check_send(c, call, _topics(copies))
    return c.store.cancel_or_reschedule(copies, deliver_at)


def _message_copies(c: StoreContext, call: Call) -> tuple[str, dict[str, list[CommitLogRecord]]]:
    msg_id = call.args["msgId"]
    check_id(msg_id)
    set_attribute(MESSAGE_ID, msg_id)
    return msg_id, c.store.copies_of(msg_id)


@changed
def cancel_message(c: StoreContext, call: Call) -> Reply:
    """200 cancelled; 409 ALREADY_DELIVERED; 404 MESSAGE_NOT_FOUND."""
    msg_id, copies = _message_copies(c, call)
    outcome = _act(c, call, copies, None)
    return 200, MessageCancelled(FATES[outcome.status], msg_id).to_json()


@changed
def reschedule_message(c: StoreContext, call: Call) -> Reply:
    """200 rescheduled with the new time; 409 ALREADY_DELIVERED; 404 MESSAGE_NOT_FOUND."""
    target = _target(c, call)
    msg_id, copies = _message_copies(c, call)
    outcome = _act(c, call, copies, target)
    assert outcome.deliver_at is not None
    return 200, MessageRescheduled(FATES[outcome.status], msg_id, outcome.deliver_at).to_json()


def _key_copies(c: StoreContext, call: Call) -> dict[str, list[CommitLogRecord]]:
    topic = validation.validate_topic_name(call.query.get("topic"))
    key = call.query.get("key")
    if not key:
        raise ValidationError("query parameter key is required", code="INVALID_REQUEST")
    jsonio.check_fields(dict(call.query), frozenset({"topic", "key"}), "query")
    trace_topic(topic)
    copies = c.store.copies_by_key(topic, key)
    if not copies:
        raise MessageNotFound(f"no message of topic {topic} with key {key!r}")
    return copies


@changed
def cancel_by_key(c: StoreContext, call: Call) -> Reply:
    """Every pending delayed message of ``topic`` with ``key``: 200 cancelled ``msgIds``."""
    outcome = _act(c, call, _key_copies(c, call), None)
    return 200, KeyCancelled(FATES[outcome.status], outcome.msg_ids).to_json()


@changed
def reschedule_by_key(c: StoreContext, call: Call) -> Reply:
    """Every pending delayed message of ``topic`` with ``key``, given one new time."""
    target = _target(c, call)
    outcome = _act(c, call, _key_copies(c, call), target)
    assert outcome.deliver_at is not None
    return 200, KeyRescheduled(FATES[outcome.status], outcome.msg_ids,
                               outcome.deliver_at).to_json()


def timer_backlog(c: StoreContext, call: Call) -> Reply:
    """Pending timers by hour ahead, handed over, next due time, lateness."""
    return 200, timer_backlog_answer(c.store.timer_backlog(_now_ms())).to_json()


def timer_handover(c: StoreContext, call: Call) -> Reply:
    """Hand the due timers over (the scheduler's): never early, never twice (T1, T2, D9); the
    metrics counted (delivered, parked, lateness), the deliver spans, an idle call's span not
    exported. R2 (read-only) refused before the body is read. A long poll: the route is on the
    lean path (a server thread), never the poller."""
    c.require_writable()
    asked = TimerHandoverRequest.from_json(call.json(), what="handover", strict=True)
    r = c.store.handover_timers(asked.max_count, asked.wait_ms, _now_ms, asked.fence)
    if r.delivered:
        c.obs.delivered.labels(TIMER_LABEL).inc(r.delivered)
    if r.parked:
        c.obs.parked.labels(TIMER_LABEL).inc(r.parked)
    c.obs.lateness.observe_many(TIMER_LABEL, r.lateness_ms)
    set_attribute(telemetry.DELIVERED, r.delivered)
    if not (r.delivered or r.parked):
        idle()
    deliver_spans(c.obs.tracer, TIMER_LEVEL, r.delivered_messages)
    return 200, timer_handover_answer(r).to_json()
