"""Pull: ``GET /v1/topics/{topic}/queues/{queueId}/messages?offset=&max=&tags=&body=&waitMs=``
(C3).

The schedule topic is never pulled by consumers (S3); `%RETRY%` and `%DLQ%` pull like any
topic. An offset below the queue's minimum reads from the minimum; above its maximum, or a
queueId the topic does not have, is 400 OFFSET_OUT_OF_RANGE.

``waitMs`` (0 or absent: answer at once): when nothing at the offset matches, the pull is held
until a message is appended to the queue or the wait ends, then answers the page as usual
(maybe empty): the engine's pull hold (``MessageStore.pull``), at most
``CLEPSYDRA_STORE_PULL_HOLD_MAX`` at once. A held pull waits in a server thread, never on the
poller: the route is on the poller's lane, but the poller answers only a pull that cannot wait
(:func:`may_hold` false: no ``waitMs``, or entries past its offset and no tag filter) and hands
any other to a thread untouched (DEC-poller-pull).
"""

from __future__ import annotations

from clepsydra_core import validation
from clepsydra_core.errors import ClepsydraError, OffsetOutOfRange
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.messages import DEFAULT_PULL, MAX_PULL, MAX_PULL_WAIT_MS
from clepsydra_store.api.answers import VIEWS, with_body_arg
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.api.observability import set_attribute
from clepsydra_web import jsonio
from clepsydra_web.tracing import idle

DEFAULT_MAX = DEFAULT_PULL
MAX_MESSAGES = MAX_PULL


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """C3: ``*`` or nothing means every message; ``a || b`` means tags a or b."""
    if expression is None:
        return None
    tags = frozenset(t.strip() for t in expression.split("||")) - {""}
    if not tags or "*" in tags:
        return None
    return tags


def may_hold(c: StoreContext, call: Call) -> bool:
    """Whether this pull may wait (the poller hands it to a thread then, DEC-poller-pull):
    False only when it surely answers at once: no ``waitMs`` (or 0), or no tag filter and
    entries in the queue past its offset. Any doubt (bad input, a tag filter) says True: the
    thread answers as before. Reads no message and records nothing."""
    args = call.query
    wait = args.get("waitMs")
    if wait is None or wait == "0":
        return False
    if parse_tags(args.get("tags")) is not None:
        return True  # the entries past the offset may all be filtered out
    try:
        queue_offset = jsonio.query_int(args, "offset", 0, code=OffsetOutOfRange.code)
        qid = jsonio.path_int(call.args["queueId"], "queueId", maximum=jsonio.INT32_MAX,
                              code=OffsetOutOfRange.code)
    except ClepsydraError:
        return True
    return queue_offset >= c.store.queue_end(call.args["topic"], qid)


def pull(c: StoreContext, call: Call) -> Reply:
    """The page a pull answers (C3, S3), held per ``waitMs``; ClepsydraError for bad input."""
    topic, args = call.args["topic"], call.query
    validation.validate_topic_name(topic)
    validation.check_consumable(topic)
    trace_topic(topic)
    qid = jsonio.path_int(call.args["queueId"], "queueId", maximum=jsonio.INT32_MAX,
                          code=OffsetOutOfRange.code)
    queue_offset = jsonio.query_int(args, "offset", 0, code=OffsetOutOfRange.code)
    max_count = jsonio.query_int(args, "max", DEFAULT_MAX, minimum=1, maximum=MAX_MESSAGES)
    wait_ms = jsonio.query_int(args, "waitMs", 0, maximum=MAX_PULL_WAIT_MS)
    store = c.store
    info = store.get_topic(topic)
    queue = next((q for q in info.queues if q.queue_id == qid), None)
    if queue is None:
        raise OffsetOutOfRange(f"topic {topic!r} has queues 0..{len(info.queues) - 1}, "
                               f"not {qid}")
    if queue_offset > queue.max_offset:
        raise OffsetOutOfRange(f"offset {queue_offset} is past the end of {topic!r} queue {qid} "
                               f"(maxOffset {queue.max_offset})")
    # on the poller (may_hold said it answers at once) it never waits: should the queue have
    # changed in between, it answers as a store holding its most pulls already does
    # the page read straight as its JSON view (DEC-pull-json-view)
    read = store.pull(topic, qid, queue_offset, max_count, parse_tags(args.get("tags")),
                      wait_ms, 0 if call.poller else c.settings.pull_hold_max,
                      VIEWS[with_body_arg(args)])
    if read.messages:
        set_attribute(telemetry.MESSAGING_SYSTEM, telemetry.SYSTEM)
        set_attribute(telemetry.OPERATION_TYPE, telemetry.RECEIVE)
        set_attribute(telemetry.BATCH_COUNT, len(read.messages))
    else:
        idle()  # an empty (long-poll) pull: no span exported
    return 200, {"messages": read.messages,
                 "nextOffset": read.next_offset, "minOffset": read.min_offset,
                 "maxOffset": read.max_offset}
