"""A lean WSGI path for the two produce routes, the pull and the timers' hand-over, in front of
Flask.

``POST /v1/topics/<topic>/messages`` and ``.../messages/batch`` are the hot routes, with the
scheduler's ``POST /v1/schedule/timers/handover`` (~800 calls/s in the timers' steady state,
issue 14; answered by ``timers.serve`` the same way: span, metrics, ``SCHEDULE_HANDOVER``,
errors; a long poll, so only in the worker thread, never on the poller) and the consumers'
``GET /v1/topics/<topic>/queues/<queueId>/messages`` (``queues.serve`` the same way, ``PULL``;
a held pull waits in the worker thread too). Flask's request/response objects, routing and
hooks cost more than the produce itself (README, "Where the time goes"), so this middleware
answers them directly and hands every other request to Flask. It calls the same
``produce.serve`` as the Flask views: same checks, same span, same metrics, same JSON bodies
and status codes. ``CLEPSYDRA_STORE_FAST_PATH=false`` turns it off (the Flask routes then
answer); the test-suite runs the produce and pull cases both ways.

With access control on, the same ``Guard`` as Flask's hook checks the bearer token and ``SEND``
on the topic before the body is read: a token seen before costs one dict lookup. The store's
worker answers produce requests on kept-alive connections on its poller thread through
:meth:`ProduceFastPath.answer` (``inline.py``): the same answers again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from clepsydra_core.auth import Action
from clepsydra_core.wire.cluster import SHARDS_HEADER
from clepsydra_store.api import produce, queues, timers
from clepsydra_store.api.context import StoreContext
from clepsydra_web.auth import REFUSALS, Guard, refusal
from clepsydra_web.jsonio import JSON_TYPE

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Answer = tuple[str, list[tuple[str, str]], bytes]
"""(status line, headers, body) of an answer."""

_PREFIX = "/v1/topics/"
_ONE = "/messages"
_BATCH = "/messages/batch"
_TIMER_HANDOVER = "/v1/schedule/timers/handover"
_QUEUES = "/queues/"
_REASONS = {200: "200 OK", 201: "201 Created", 400: "400 Bad Request", 401: "401 Unauthorized",
            403: "403 Forbidden", 429: "429 Too Many Requests",
            404: "404 Not Found", 409: "409 Conflict", 413: "413 Request Entity Too Large",
            500: "500 Internal Server Error", 503: "503 Service Unavailable"}


class ProduceFastPath:
    """WSGI middleware: produce requests here, everything else to ``app``."""

    def __init__(self, app: WsgiApp, context: StoreContext, guard: Guard | None = None) -> None:
        self.app = app
        self.context = context
        self.guard = guard
        self.limit = context.settings.max_request_bytes
        cluster = context.cluster
        self.shards_header = (None if cluster is None or not cluster.clustered
                              else (SHARDS_HEADER, str(cluster.shape.shards)))

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST":
            path: str = environ.get("PATH_INFO", "")
            if path == _TIMER_HANDOVER:
                return self._timer_handover(environ, start_response)
            if path.startswith(_PREFIX):
                if path.endswith(_ONE):
                    topic, batch = path[len(_PREFIX):-len(_ONE)], False
                elif path.endswith(_BATCH):
                    topic, batch = path[len(_PREFIX):-len(_BATCH)], True
                else:
                    topic, batch = "", False
                if topic and "/" not in topic:
                    return self._produce(environ, start_response, topic, batch)
        elif environ.get("REQUEST_METHOD") == "GET":
            path = environ.get("PATH_INFO", "")
            if path.startswith(_PREFIX) and path.endswith(_ONE):
                topic, sep, queue_id = path[len(_PREFIX):-len(_ONE)].partition(_QUEUES)
                if sep and topic and queue_id and "/" not in topic and "/" not in queue_id:
                    return self._pull(environ, start_response, topic, queue_id)
        return self.app(environ, start_response)

    def _produce(self, environ: dict[str, Any], start_response: Callable[..., Any],
                 topic: str, batch: bool) -> Iterable[bytes]:
        topic = _utf8(topic)
        status, headers, body = (self.refuse(environ, topic)  # before the body is read
                                 or self.produce(environ, topic, batch, self._read(environ)))
        start_response(status, headers)
        return [body]

    def _timer_handover(self, environ: dict[str, Any],
                        start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The scheduler's timer hand-over (a long poll: this worker thread waits in it)."""
        status, headers, body = timers.serve(self.context, environ, lambda: self._read(environ))
        start_response(_REASONS.get(status, f"{status} Error"), self._with_shards(headers))
        return [body]

    def _pull(self, environ: dict[str, Any], start_response: Callable[..., Any],
              topic: str, queue_id: str) -> Iterable[bytes]:
        """A consumer's pull (a held one waits in this worker thread)."""
        status, headers, body = queues.serve(self.context, environ, _utf8(topic),
                                             _utf8(queue_id))
        start_response(_REASONS.get(status, f"{status} Error"), self._with_shards(headers))
        return [body]

    def _with_shards(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return headers if self.shards_header is None else [*headers, self.shards_header]

    def answer(self, environ: dict[str, Any], topic: str, batch: bool,
               raw: bytes | None) -> Answer:
        """The answer to a produce request whose body was read already (the worker's poller
        thread calls this, inline.py)."""
        return self.refuse(environ, topic) or self.produce(environ, topic, batch, raw)

    def refuse(self, environ: dict[str, Any], topic: str) -> Answer | None:
        """The 401, 403 or 429 answer when the request's token may not send to ``topic``."""
        if self.guard is None:
            return None
        try:
            self.guard.check(environ.get("HTTP_AUTHORIZATION"), Action.SEND, topic)
        except REFUSALS as exc:
            code, headers, body = refusal(exc)
            return _REASONS[code], headers, body
        return None

    def produce(self, environ: dict[str, Any], topic: str, batch: bool,
                raw: bytes | None) -> Answer:
        """``raw`` None: the body was over the size limit (413)."""
        status, body = produce.serve(self.context, environ, topic, raw, batch)
        headers = [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body)))]
        if self.shards_header is not None:  # the poller's answers too (DEC-store-shards)
            headers.append(self.shards_header)
        return (_REASONS.get(status, f"{status} Error"), headers, body)

    def _read(self, environ: dict[str, Any]) -> bytes | None:
        """The request body, or None when it is over the limit."""
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH")
        if length:
            try:
                size = int(length)
            except ValueError:
                size = -1
            if size > self.limit:
                return None
            if size >= 0:
                data: bytes = stream.read(size)
                return data
        data = stream.read(self.limit + 1)
        return None if len(data) > self.limit else data


def _utf8(segment: str) -> str:
    """A PATH_INFO segment ("bytes as latin-1", PEP 3333) decoded as Werkzeug does: UTF-8."""
    return segment.encode("latin-1").decode("utf-8", "replace")
