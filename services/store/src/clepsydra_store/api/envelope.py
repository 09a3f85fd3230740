"""One envelope around every answer of a store route, however the request came in (a Flask
view, the lean WSGI path, the worker's poller): the access check (``Guard``, the route's
``Need``), the request's span ``store.<operation>`` and metrics (O1, O2), the handler's JSON
answer or the v1 error body of what it raised (``clepsydra_web.errors.error_answer``), and the
status line. A route is a :class:`StoreRoute` of the one route table (``contract.py``); its
handler is framework-free: it gets a :class:`Call` (environ, path arguments, query, body) and
answers ``(status, JSON value)`` or raises.

Order, the same on every way in: a route whose span may continue a message's own trace
(produce, ``Trace.FROM_MESSAGE``) is checked before its span starts and its body is read (a
refusal makes no span and is not counted); every other route starts its span, then is checked
(a refusal is counted and traced)."""

from __future__ import annotations

import http
from collections.abc import Callable, Mapping, Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from clepsydra_core.errors import ClepsydraError
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.observability import DESTINATION, set_attribute
from clepsydra_store.settings import MAX_REQUEST_BYTES_VAR
from clepsydra_web.auth import REFUSALS, Need, refusal
from clepsydra_web.errors import error_answer, request_too_large
from clepsydra_web.jsonio import JSON_TYPE, dumps, loads_object
from clepsydra_web.openapi import Route

Answer = tuple[int, list[tuple[str, str]], bytes]
"""(status, headers, body) of an answer."""
Reply = tuple[int, Any]
"""A handler's answer: (status, its JSON value)."""


class Trace(Enum):
    """How a route's request is traced (O1; an idle stack exports almost nothing)."""

    SPAN = "span"
    """A span ``store.<operation>``, a child of the caller's ``traceparent``."""
    IN_TRACE_ONLY = "in-trace-only"
    """A poll that carries no message: a span only when the caller is inside a trace."""
    UNTRACED = "untraced"
    """No request span (counted all the same): the level table; the copy, which makes one
    span per copied message instead."""
    FROM_MESSAGE = "from-message"
    """A produce: the span continues the caller's ``traceparent``, else a single message's
    own ``traceparent`` property; checked before its body is read."""


class Lane(Enum):
    """The ways in that answer a route (every route is a Flask view too)."""

    FLASK = "flask"
    LEAN = "lean"
    """Also the lean WSGI path in front of Flask (``fastpath.py``)."""
    POLLER = "poller"
    """Also the worker's poller thread on a kept-alive connection (``inline.py``): routes
    with plain path parameters that never block, or that say which calls may
    (:attr:`StoreRoute.holds`: those go to a thread)."""


class Call:
    """One request as a handler sees it."""

    __slots__ = ("_body", "_json", "_query", "args", "environ", "limit", "poller", "read",
                 "span")

    def __init__(self, environ: Mapping[str, Any], args: Mapping[str, str],
                 query: Callable[[], Mapping[str, str]], read: Callable[[], bytes | None],
                 limit: int, body: bytes | None = None, poller: bool = False) -> None:
        # (comments, not attribute docstrings: each of those is an instruction per request)
        self.environ = environ
        self.args = args  # the path's parameters, decoded
        self._query: Callable[[], Mapping[str, str]] | Mapping[str, str] = query
        self.read = read  # the body, None when it is over ``limit`` bytes
        self.limit = limit
        self._body = body  # the body when it was read before (the poller's), else None
        self._json: dict[str, Any] | ClepsydraError | None = None
        self.poller = poller  # answered on the worker's poller thread: it must never wait
        # a Trace.FROM_MESSAGE route's request span, given to its handler: current only when
        # recorded (DEC-produce-span-handed); None on the other routes: the current span
        self.span: trace.Span | None = None

    @property
    def query(self) -> Mapping[str, str]:
        """The query string's parameters (the first value of a repeated name), read when first
        asked for."""
        query = self._query
        if callable(query):
            query = self._query = query()
        return query

    def body(self) -> bytes:
        """The request body; 413 (P1) over the size limit."""
        if self._body is None:
            raw = self.read()
            if raw is None:
                raise request_too_large(self.limit, MAX_REQUEST_BYTES_VAR)
            self._body = raw
        return self._body

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (400 INVALID_JSON otherwise, 413 over the limit); read
        once, its error raised again."""
        parsed = self._json
        if parsed is None:
            try:
                raw = self._body  # (the poller's, given: no call to body())
                parsed = self._json = loads_object(raw if raw is not None else self.body())
            except ClepsydraError as exc:
                self._json = exc
                raise
        elif isinstance(parsed, ClepsydraError):
            raise parsed
        return parsed

    def header(self, name: str) -> str | None:
        """A request header, by its WSGI name (``HTTP_AUTHORIZATION``)."""
        value = self.environ.get(name)
        return value if isinstance(value, str) else None


Handler = Callable[[StoreContext, Call], Reply]
Parent = Callable[[Call], otel_context.Context | str | None]
"""A ``Trace.FROM_MESSAGE`` route's parent of its span: a context, a plain ``traceparent``
(``clepsydra_web.tracing.plain_parent``), or None (a new trace)."""
Holds = Callable[[StoreContext, Call], bool]


@dataclass(frozen=True, slots=True)
class Group:
    """A route whose calls that are ready on the poller together are appended as one batch
    (DEC-poller-group-append): its handler in three parts. ``request`` reads a call up to
    its append (or raises: that call's answer), ``append`` appends the group's (one outcome
    each, in order: a result, or the exception that refused that one alone), ``reply``
    answers a call from its outcome (or raises)."""

    request: Callable[[StoreContext, Call], Any]
    append: Callable[[StoreContext, list[Any]], Sequence[Any]]
    reply: Callable[[StoreContext, Call, Any, Any], Reply]


@dataclass(frozen=True, slots=True)
class StoreRoute:
    """One route of the table: its OpenAPI operation (method, path, documents), its Flask
    endpoint, its handler, the action it needs, how it is traced and counted, and its ways
    in."""

    doc: Route
    endpoint: str
    handler: Handler
    need: Need
    operation: str
    """The ``operation`` of its span (``store.<operation>``) and metrics."""
    trace: Trace = Trace.SPAN
    lane: Lane = Lane.FLASK
    parent: Parent | None = field(default=None)
    """``Trace.FROM_MESSAGE``: the span's parent, from the call."""
    holds: Holds | None = field(default=None)
    """``Lane.POLLER``, a route whose call may wait (the pull's hold): True when this call
    may, read before its answer begins; the poller then hands the request to a thread
    untouched, which answers it as any other way in (DEC-poller-pull)."""
    group: Group | None = field(default=None)
    """``Lane.POLLER`` and ``Trace.FROM_MESSAGE``: several calls ready together on the poller
    answered as one append (:func:`answer_group`)."""

    @property
    def method(self) -> str:
        return self.doc.method

    @property
    def path(self) -> str:
        return self.doc.path

    def traced(self, environ: Mapping[str, Any]) -> bool:
        if self.trace is Trace.IN_TRACE_ONLY:
            return bool(environ.get("HTTP_TRACEPARENT"))
        return self.trace is not Trace.UNTRACED


_FROM_MESSAGE = Trace.FROM_MESSAGE  # (read per request: one name, not an Enum's attribute)
_CONTENT_TYPE = ("Content-Type", JSON_TYPE)

_STATUS_LINES = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


def status_line(status: int) -> str:
    """``201 Created``: the status and its reason phrase (RFC 9110), on every way in."""
    return _STATUS_LINES.get(status) or f"{status} Error"


def answer(c: StoreContext, route: StoreRoute, call: Call) -> Answer:
    """The answer of ``route`` to ``call``: access, span, metrics, the JSON body or the v1
    error body (see the module's docstring for the order)."""
    from_message = route.trace is _FROM_MESSAGE
    if from_message:
        if c.guard is not None:
            refused = _refused(c, route, call)
            if refused is not None:
                return refused
        parent = route.parent
        scope = c.obs.begin(route.operation, call.environ,
                            parent(call) if parent is not None else None, current=False)
        call.span = scope.span
    else:
        scope = c.obs.begin(route.operation, call.environ, traced=route.traced(call.environ))
    status = 500
    try:
        if not from_message and c.guard is not None:
            refused = _refused(c, route, call)
            if refused is not None:
                status = refused[0]
                return refused
        status, value = route.handler(c, call)
        body = dumps(value)
    except Exception as exc:  # the v1 error body; a broken chunked body is a 400
        status, body = _error_answer(scope, exc) if from_message else error_answer(exc)
    finally:
        c.obs.end(scope, status)
    return status, _headers(c, body), body


def _error_answer(scope: Any, exc: Exception) -> tuple[int, bytes]:
    """``error_answer`` of a Trace.FROM_MESSAGE route's call, its request span current while
    it is made (a 5xx's log line names the request's trace, DEC-produce-span-handed)."""
    if scope.token is not None:  # current already
        return error_answer(exc)
    token = otel_context.attach(trace.set_span_in_context(scope.span))
    try:
        return error_answer(exc)
    finally:
        otel_context.detach(token)


def _headers(c: StoreContext, body: bytes) -> list[tuple[str, str]]:
    headers = [_CONTENT_TYPE, ("Content-Length", str(len(body)))]
    if c.shards_header is not None:  # DEC-store-shards
        headers.append(c.shards_header)
    return headers


def answer_group(c: StoreContext, route: StoreRoute, calls: Sequence[Call]) -> list[Answer]:
    """The answers of ``route`` (one with a :class:`Group`, traced ``FROM_MESSAGE``) to
    several calls, their appends made as one (DEC-poller-group-append): each call checked,
    traced and counted as :func:`answer` does it, its span given to it (``Call.span``) and,
    when recorded, current (each in a context of its own) while its request is read and while
    it is answered; a call refused (access, its body, the engine's checks) answers alone and
    takes nothing of the others."""
    group = route.group
    assert group is not None and route.trace is _FROM_MESSAGE
    parent = route.parent
    answers: list[Answer | None] = [None] * len(calls)
    pending: list[tuple[int, Context | None, Any, Call, Any]] = []
    for i, call in enumerate(calls):
        if c.guard is not None:
            refused = _refused(c, route, call)
            if refused is not None:
                answers[i] = refused
                continue
        context: Context | None = copy_context()
        scope = context.run(c.obs.begin, route.operation, call.environ,  # type: ignore[union-attr]
                            parent(call) if parent is not None else None, current=False)
        call.span = scope.span
        if scope.token is None:  # context-only, not made current: no context of its own
            context = None
        try:
            request = _within(context, group.request, c, call)
        except Exception as exc:
            answers[i] = _within(context, _replied, c, scope, _raise, call, exc, None)
            continue
        pending.append((i, context, scope, call, request))
    if pending:
        outcomes = group.append(c, [p[4] for p in pending])
        for (i, context, scope, call, request), outcome in zip(pending, outcomes, strict=True):
            answers[i] = _within(context, _replied, c, scope, group.reply, call, request,
                                 outcome)
    return answers  # type: ignore[return-value]  # every one set above


def _within(context: Context | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in ``context`` (None: the current one)."""
    return fn(*args) if context is None else context.run(fn, *args)


def _replied(c: StoreContext, scope: Any, reply: Callable[[StoreContext, Call, Any, Any], Reply],
             call: Call, request: Any, outcome: Any) -> Answer:
    """A grouped call's answer from ``reply``, or the error body of what it raised; its span
    ended and the call counted."""
    status = 500
    try:
        status, value = reply(c, call, request, outcome)
        body = dumps(value)
    except Exception as exc:
        status, body = _error_answer(scope, exc)
    finally:
        c.obs.end(scope, status)
    return status, _headers(c, body), body


def _raise(c: StoreContext, call: Call, exc: Any, _: Any) -> Reply:
    raise exc


def _refused(c: StoreContext, route: StoreRoute, call: Call) -> Answer | None:
    """The 401, 403 or 429 answer when the request's token may not do what the route needs
    (None: allowed, or access control off)."""
    if c.guard is None:
        return None
    need = route.need
    try:
        c.guard.check(call.header("HTTP_AUTHORIZATION"), need.action,
                      call.args[need.arg] if need.arg is not None else None)
    except REFUSALS as exc:
        status, headers, body = refusal(exc)
        if c.shards_header is not None:  # DEC-store-shards
            headers.append(c.shards_header)
        return status, headers, body
    return None


def trace_topic(topic: str) -> None:
    """Name the topic on the request span (messaging.destination.name)."""
    set_attribute(DESTINATION, topic)
