"""Timer messages' routes (issue 15, SPEC T1-T2): cancel and reschedule a pending delayed
message by msgId or by key, the timer backlog, and the scheduler's timer hand-over.

Cancel and reschedule need the producer's right (``SEND``) on the message's topic: the route
table asks for ``SEND`` (api/access.py), and the view checks it on the real topic once the
message is found (a msgId or a query string names no topic the guard could read).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Blueprint, Response, request

from clepsydra_core import naming, telemetry, validation
from clepsydra_core import properties as P
from clepsydra_core.auth import Action
from clepsydra_core.errors import MessageNotFound, ValidationError
from clepsydra_core.msgid import check_id
from clepsydra_core.records import CommitLogRecord
from clepsydra_core.wire.timers import (
    KeyCancelled,
    KeyRescheduled,
    MessageCancelled,
    MessageRescheduled,
    RescheduleRequest,
    TimerHandoverAnswer,
    TimerHandoverRequest,
)
from clepsydra_store.api import lean
from clepsydra_store.api.context import StoreContext, ctx
from clepsydra_store.api.fanout import changed
from clepsydra_store.api.handover import deliver_spans
from clepsydra_store.api.observability import MESSAGE_ID, set_attribute
from clepsydra_store.api.web import json_response, trace_topic
from clepsydra_store.engine.dispatch import TIMER_LEVEL
from clepsydra_store.engine.timer_ops import Outcome
from clepsydra_store.settings import MAX_REQUEST_BYTES_VAR
from clepsydra_web import jsonio
from clepsydra_web.errors import too_large
from clepsydra_web.tracing import idle

bp = Blueprint("timers", __name__)

TIMER_LABEL = "timer"
"""The ``level`` label of timer figures in the store's metrics."""
HANDOVER_OPERATION = "timer_handover"
"""The operation of the timers' hand-over in the request metrics and spans (its view's name,
which Flask's hooks use)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_send(c: StoreContext, topics: set[str]) -> None:
    """The caller may send to every topic the messages belong to (issue 16)."""
    if c.guard is None:
        return
    header = request.headers.get("Authorization")
    for topic in sorted(topics):
        c.guard.check(header, Action.SEND, topic)


def _topics(copies: dict[str, list[CommitLogRecord]]) -> set[str]:
    return {r.properties.get(P.REAL_TOPIC) or r.topic
            for records in copies.values() for r in records
            if r.topic not in (naming.TIMER_TOPIC, naming.SCHEDULE_TOPIC)
            or r.properties.get(P.REAL_TOPIC)}


def _target(c: StoreContext) -> int:
    """The reschedule body's delivery time, checked against the cap (T1)."""
    asked = RescheduleRequest.from_json(jsonio.loads_object(request.get_data(cache=False)),
                                        what="reschedule", strict=True)
    return c.store.timers.target(asked.deliver_at, asked.delay_ms)


def _act(c: StoreContext, copies: dict[str, list[CommitLogRecord]],
         deliver_at: int | None) -> Outcome:
    c.require_writable()
    _check_send(c, _topics(copies))
    return c.store.timers.act(copies, deliver_at)


def _message_copies(c: StoreContext, msg_id: str) -> dict[str, list[CommitLogRecord]]:
    check_id(msg_id)
    set_attribute(MESSAGE_ID, msg_id)
    return {msg_id: c.store.get_by_msg_id(msg_id)}


@bp.delete("/v1/messages/<msg_id>")
@changed
def cancel_message(msg_id: str) -> Response:
    """200 cancelled; 409 ALREADY_DELIVERED; 404 MESSAGE_NOT_FOUND."""
    c = ctx()
    outcome = _act(c, _message_copies(c, msg_id), None)
    return json_response(MessageCancelled(outcome.status, msg_id).to_json())


@bp.patch("/v1/messages/<msg_id>")
@changed
def reschedule_message(msg_id: str) -> Response:
    """200 rescheduled with the new time; 409 ALREADY_DELIVERED; 404 MESSAGE_NOT_FOUND."""
    c = ctx()
    target = _target(c)
    outcome = _act(c, _message_copies(c, msg_id), target)
    assert outcome.deliver_at is not None
    return json_response(MessageRescheduled(outcome.status, msg_id,
                                            outcome.deliver_at).to_json())


def _key_copies(c: StoreContext) -> dict[str, list[CommitLogRecord]]:
    topic = validation.validate_topic_name(request.args.get("topic"))
    key = request.args.get("key")
    if not key:
        raise ValidationError("query parameter key is required", code="INVALID_REQUEST")
    jsonio.check_fields(dict(request.args), frozenset({"topic", "key"}), "query")
    trace_topic(topic)
    c.store.get_topic(topic)
    copies = c.store.timers.copies_by_key(topic, key, c.store.topic_since(topic))
    if not copies:
        raise MessageNotFound(f"no message of topic {topic} with key {key!r}")
    return copies


@bp.delete("/v1/messages")
@changed
def cancel_by_key() -> Response:
    """Every pending delayed message of ``topic`` with ``key``: 200 cancelled ``msgIds``."""
    c = ctx()
    outcome = _act(c, _key_copies(c), None)
    return json_response(KeyCancelled(outcome.status, outcome.msg_ids).to_json())


@bp.patch("/v1/messages")
@changed
def reschedule_by_key() -> Response:
    """Every pending delayed message of ``topic`` with ``key``, given one new time."""
    c = ctx()
    target = _target(c)
    outcome = _act(c, _key_copies(c), target)
    assert outcome.deliver_at is not None
    return json_response(KeyRescheduled(outcome.status, outcome.msg_ids,
                                        outcome.deliver_at).to_json())


@bp.get("/v1/schedule/timers")
def timer_backlog() -> Response:
    """Pending timers by hour ahead, handed over, next due time, lateness."""
    return json_response(ctx().store.timers.backlog(_now_ms()).to_json())


@bp.post("/v1/schedule/timers/handover")
def timer_handover() -> Response:
    """Hand the due timers over (the scheduler's): never early, never twice (T1, T2, D9).
    The store's lean path (api/fastpath.py) answers it below Flask through :func:`serve`;
    this view answers with ``CLEPSYDRA_STORE_FAST_PATH=false``."""
    return json_response(handover_answer(ctx(), lambda: request.get_data(cache=False)))


def handover_answer(c: StoreContext, read: Callable[[], bytes]) -> dict[str, Any]:
    """The timers' hand-over of the request body ``read()`` gives, inside the request's span:
    the answer, the metrics counted (delivered, parked, lateness), the deliver spans, an idle
    call's span not exported. ClepsydraError for a read-only store (R2, before the body is
    read) and a bad body."""
    c.require_writable()
    asked = TimerHandoverRequest.from_json(jsonio.loads_object(read()), what="handover",
                                           strict=True)
    r = c.store.timers.handover_wait(asked.max_count, asked.wait_ms, _now_ms, asked.fence)
    if r.delivered:
        c.obs.delivered.labels(TIMER_LABEL).inc(r.delivered)
    if r.parked:
        c.obs.parked.labels(TIMER_LABEL).inc(r.parked)
    c.obs.lateness.observe_many(TIMER_LABEL, r.lateness_ms)
    set_attribute(telemetry.DELIVERED, r.delivered)
    if not (r.delivered or r.parked):
        idle()
    deliver_spans(c.obs.tracer, TIMER_LEVEL, r.delivered_messages)
    return TimerHandoverAnswer(r.delivered, r.parked, r.next_due_at, r.lateness_ms).to_json()


def serve(c: StoreContext, environ: Mapping[str, Any], read: Callable[[], bytes | None]
          ) -> lean.Answer:
    """Answer one ``POST /v1/schedule/timers/handover`` below Flask (issue 14), as the view
    and Flask's hooks and error handlers do: the request's span and metrics (operation
    ``timer_handover``), ``SCHEDULE_HANDOVER`` checked first when access control is on,
    errors as ``ErrorAnswer`` with the same codes. ``read()`` gives the body, None when it is
    over the size limit (413). It may block (a long poll): a worker thread calls it, never
    the poller."""
    return lean.answer(c, environ, HANDOVER_OPERATION, Action.SCHEDULE_HANDOVER, None,
                       lambda: handover_answer(c, lambda: _body(c, read)))


def _body(c: StoreContext, read: Callable[[], bytes | None]) -> bytes:
    raw = read()
    if raw is None:
        raise too_large(c.settings.max_request_bytes, MAX_REQUEST_BYTES_VAR)
    return raw
