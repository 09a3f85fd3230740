"""The scheduler's hand-over (SPEC D3-D10, docs/contracts.md): level table with queue bounds,
deliver timestamps of a level's entries, and hand-over of due entries done inside the store
(the scheduler reads 20-byte entries only; bodies never leave the store)."""

from __future__ import annotations

from opentelemetry import trace

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.schedule import (
    DEFAULT_ENTRIES,
    MAX_ENTRIES,
    HandoverRequest,
    LevelInfo,
    LevelTable,
)
from clepsydra_store.api.answers import entries_answer, handover_answer
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply
from clepsydra_store.api.observability import DESTINATION, MESSAGE_ID, set_attribute
from clepsydra_store.engine.types import TIMER_LEVEL, Delivered
from clepsydra_web import jsonio
from clepsydra_web.tracing import idle


def _level(c: StoreContext, raw: str) -> int:
    levels = c.settings.common.delay_levels
    level = jsonio.path_int(raw, "level", minimum=1, maximum=levels.max_level,
                            code="INVALID_DELAY_LEVEL", rule="L3")
    set_attribute(DESTINATION, naming.SCHEDULE_TOPIC)
    set_attribute(telemetry.DELAY_LEVEL, level)
    return level


def deliver_spans(tracer: trace.Tracer, level: int, delivered: list[Delivered]) -> None:
    """One ``store.deliver`` span per delivered message (O1, D10): in the producer's trace
    (parent = the message's ``traceparent``) with a link to the current ``store.handover``
    span when that one is sampled, or a child of that span when the message carries no trace
    context. A sampled message gets its span whether the batch's hand-over was sampled or not
    (each trace is sampled on its own, SPEC O1).

    Cost is kept in proportion to what is kept: none when spans are not exported, and none
    for a message whose producer's trace was not sampled (the parent-based sampler would drop
    the span anyway) - at ~15 us a span they would otherwise be half of a drain's CPU."""
    if not delivered or not telemetry.exporting():
        return
    handover_span = trace.get_current_span()
    links = [trace.Link(handover_span.get_span_context())] if handover_span.is_recording() \
        else []
    for topic, msg_id, traceparent, lateness_ms in delivered:
        if traceparent and not telemetry.parent_sampled(traceparent):
            continue
        parent = telemetry.extract({P.TRACEPARENT: traceparent}) if traceparent else None
        if parent is not None and not trace.get_current_span(parent).get_span_context().is_valid:
            parent = None  # malformed traceparent: stay in the hand-over's trace
        tracer.start_span("store.deliver", context=parent, links=links,
                          kind=trace.SpanKind.PRODUCER, attributes={
            telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM, telemetry.OPERATION_TYPE: telemetry.SEND,
            DESTINATION: topic, MESSAGE_ID: msg_id, telemetry.DELAY_LEVEL: level,
            telemetry.LATENESS_MS: lateness_ms}).end()


def levels(c: StoreContext, call: Call) -> Reply:
    """The level table with each schedule queue's bounds and handed-over mark."""
    table = c.settings.common.delay_levels
    queues = {q.queue_id: q for q in c.store.get_topic(naming.SCHEDULE_TOPIC).queues}
    out: list[LevelInfo] = []
    for level in table.levels():
        queue_id = table.queue_id(level)
        queue = queues.get(queue_id)
        min_offset = queue.min_offset if queue else 0
        entries = c.store.schedule_entries(level, min_offset, 1)
        out.append(LevelInfo(level, table.delay_ms(level), queue_id, entries.min_offset,
                             entries.max_offset, entries.handed_over,
                             c.store.newest_fence(level)))
    return 200, LevelTable(out, c.store.newest_fence(TIMER_LEVEL)).to_json()


def entries(c: StoreContext, call: Call) -> Reply:
    """Deliver timestamps of entries ``offset, offset+1, ...`` of a level (D3)."""
    lvl = _level(c, call.args["level"])
    queue_offset = jsonio.query_int(call.query, "offset", 0, code="OFFSET_OUT_OF_RANGE")
    max_count = jsonio.query_int(call.query, "max", DEFAULT_ENTRIES, minimum=1,
                                 maximum=MAX_ENTRIES)
    return 200, entries_answer(c.store.schedule_entries(lvl, queue_offset, max_count)).to_json()


def handover(c: StoreContext, call: Call) -> Reply:
    """Hand due entries over to their real topics (D4-D9); never early, never twice: the
    engine's one loop, a lock chunk at a time (DEC-handover-lock-chunk)."""
    c.require_writable()
    lvl = _level(c, call.args["level"])
    asked = HandoverRequest.from_json(call.json(), what="handover", strict=True)
    r = c.store.handover(lvl, asked.from_offset, asked.max_count, fence=asked.fence)
    label = str(lvl)
    if r.delivered:
        c.obs.delivered.labels(label).inc(r.delivered)
    if r.parked:
        c.obs.parked.labels(label).inc(r.parked)
    c.obs.lateness.observe_many(label, r.lateness_ms)
    set_attribute(telemetry.DELIVERED, r.delivered)
    if not (r.delivered or r.parked or r.skipped):
        idle()  # nothing was due: neither this span nor the scheduler's is exported
    deliver_spans(c.obs.tracer, lvl, r.delivered_messages)
    return 200, handover_answer(r).to_json()
