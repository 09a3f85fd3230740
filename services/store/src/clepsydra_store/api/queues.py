"""Pull: ``GET /v1/topics/{topic}/queues/{queueId}/messages?offset=&max=&tags=&body=&waitMs=``
(C3).

The schedule topic is never pulled by consumers (S3); `%RETRY%` and `%DLQ%` pull like any
topic. An offset below the queue's minimum reads from the minimum; above its maximum, or a
queueId the topic does not have, is 400 OFFSET_OUT_OF_RANGE.

``waitMs`` (issue 14, the pull hold; 0 or absent: answer at once): when nothing at the offset
matches, the pull is held until a message is appended to the queue (the engine's
``Arrivals``, woken by the dispatcher) or the wait ends, then answers the page as usual (maybe
empty). At most ``CLEPSYDRA_STORE_PULL_HOLD_MAX`` pulls are held at once; past that, and while
the store stops, a pull answers at once. The store's lean path (api/fastpath.py) answers the
route below Flask through :func:`serve`, in a server thread (never the poller).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import werkzeug.urls  # noqa: F401  (registers the "werkzeug.url_quote" codec error handler)
from flask import Blueprint, Response, request

from clepsydra_core import telemetry, validation
from clepsydra_core.auth import Action
from clepsydra_core.errors import OffsetOutOfRange
from clepsydra_core.wire.messages import DEFAULT_PULL, MAX_PULL, MAX_PULL_WAIT_MS
from clepsydra_store.api import lean
from clepsydra_store.api.context import StoreContext, ctx
from clepsydra_store.api.observability import set_attribute
from clepsydra_store.api.web import messages_json, trace_topic, with_body_arg
from clepsydra_web import jsonio
from clepsydra_web.jsonio import JSON_TYPE
from clepsydra_web.tracing import idle

bp = Blueprint("queues", __name__)

DEFAULT_MAX = DEFAULT_PULL
MAX_MESSAGES = MAX_PULL
PULL_OPERATION = "pull"
"""The operation of a pull in the request metrics and spans (its view's name)."""


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """C3: ``*`` or nothing means every message; ``a || b`` means tags a or b."""
    if expression is None:
        return None
    tags = frozenset(t.strip() for t in expression.split("||")) - {""}
    if not tags or "*" in tags:
        return None
    return tags


@bp.get("/v1/topics/<topic>/queues/<queue_id>/messages")
def pull(topic: str, queue_id: str) -> Response:
    """The Flask view (``CLEPSYDRA_STORE_FAST_PATH=false``); the lean path calls :func:`serve`."""
    body = jsonio.dumps(pull_page(ctx(), topic, queue_id, request.args))
    return Response(body, mimetype=JSON_TYPE)


def pull_page(c: StoreContext, topic: str, queue_id: str,
              args: Mapping[str, str]) -> dict[str, Any]:
    """The page a pull answers (C3, S3), held per ``waitMs``; ClepsydraError for bad input."""
    validation.validate_topic_name(topic)
    validation.check_consumable(topic)
    trace_topic(topic)
    qid = jsonio.path_int(queue_id, "queueId", maximum=jsonio.INT32_MAX,
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
    read = store.pull(topic, qid, queue_offset, max_count, parse_tags(args.get("tags")),
                      wait_ms, c.settings.pull_hold_max)
    if read.messages:
        set_attribute(telemetry.MESSAGING_SYSTEM, telemetry.SYSTEM)
        set_attribute(telemetry.OPERATION_TYPE, telemetry.RECEIVE)
        set_attribute(telemetry.BATCH_COUNT, len(read.messages))
    else:
        idle()  # an empty (long-poll) pull: no span exported (issue 19)
    return {"messages": messages_json(read.messages, with_body_arg(args)),
            "nextOffset": read.next_offset, "minOffset": read.min_offset,
            "maxOffset": read.max_offset}


def serve(c: StoreContext, environ: Mapping[str, Any], topic: str, queue_id: str) -> lean.Answer:
    """Answer one pull below Flask (issue 14), as the view and Flask's hooks and error
    handlers do: the request's span and metrics (operation ``pull``), ``PULL`` on the topic
    checked first when access control is on, errors as ``ErrorAnswer`` with the same codes.
    ``topic`` and ``queue_id`` are the path's segments, decoded. It may block (a held pull):
    a worker thread calls it, never the poller."""
    return lean.answer(c, environ, PULL_OPERATION, Action.PULL, topic,
                       lambda: pull_page(c, topic, queue_id, query_args(environ)))


def query_args(environ: Mapping[str, Any]) -> dict[str, str]:
    """The query string's parameters as Flask's ``request.args.get`` reads them: decoded
    the same way, the first value of a repeated name."""
    raw: str = environ.get("QUERY_STRING", "")
    args: dict[str, str] = {}
    for name, value in parse_qsl(raw.encode("latin-1").decode(), keep_blank_values=True,
                                 errors="werkzeug.url_quote"):
        args.setdefault(name, value)
    return args
