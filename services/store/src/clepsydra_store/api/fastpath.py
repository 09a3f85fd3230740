"""The lean WSGI path in front of Flask (DEC-one-envelope): the routes of the table's lean and
poller lanes (``contract.py``: produce single and batch, the pull, the timers' hand-over, the
consumer's offset commit and heartbeat, the scheduler's level entries read) answered below
Flask, through the same envelope as Flask's views (``envelope.py``: access,
span, metrics, errors, status line); every other request goes to Flask.

Flask's request and response objects, routing and hooks cost more than a produce itself, and
these are the hot routes: the producers', the consumers' pull (a held pull waits in the worker
thread), commit and heartbeat, the scheduler's timers' hand-over (a long poll, hundreds of calls
a second while timers fall due) and its level runs' entries reads (about once a second each, at
rest too; DEC-lean-steady-calls). ``CLEPSYDRA_STORE_FAST_PATH=false`` turns it off (Flask's
views then answer); the test-suite runs the cases both ways and compares the answers byte for
byte (tests/integration/store_api/test_ways_in.py). The worker's poller answers the poller lane's
requests on kept-alive connections through :meth:`LeanPath.answer_poller` (``inline.py``): the
produces, and the pulls that cannot wait (DEC-poller-pull).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import werkzeug.urls  # noqa: F401  (registers the "werkzeug.url_quote" codec error handler)

from clepsydra_core.validation import PLAIN_NAME
from clepsydra_store.api import envelope
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Lane, StoreRoute, status_line
from clepsydra_store.inline import PollerAnswer, PollerRequest, RequestLines

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_PARAM = re.compile(r"\{(\w+)\}")
_EMPTY: Mapping[str, str] = {}


def path_pattern(path: str) -> re.Pattern[str]:
    """A route's path template as a regular expression over PATH_INFO: each ``{parameter}``
    one segment (no ``/``), as Flask's default converter matches it."""
    return re.compile(_PARAM.sub(lambda m: f"(?P<{m.group(1)}>[^/]+)",
                                 re.escape(path).replace("\\{", "{").replace("\\}", "}")))


def poller_lines(routes: Iterable[StoreRoute] | None = None) -> RequestLines:
    """The request lines of the poller lane's routes (the route table's by default)."""
    if routes is None:
        from clepsydra_store.api.contract import ROUTES

        routes = ROUTES
    return RequestLines([(r.endpoint, r.method, r.path) for r in routes
                         if r.lane is Lane.POLLER], PLAIN_NAME)


class LeanPath:
    """WSGI middleware: the lean and poller lanes' routes here, everything else to ``app``."""

    def __init__(self, app: WsgiApp, context: StoreContext,
                 routes: Iterable[StoreRoute]) -> None:
        self.app = app
        self.context = context
        self.limit = context.settings.max_request_bytes
        routes = list(routes)
        self._matchers: dict[str, list[tuple[re.Pattern[str], StoreRoute]]] = {}
        for route in routes:
            if route.lane is not Lane.FLASK:
                self._matchers.setdefault(route.method, []).append(
                    (path_pattern(route.path), route))
        self._poller = {r.endpoint: r for r in routes if r.lane is Lane.POLLER}
        self.lines = poller_lines(routes)
        """The poller's request lines (``inline.py``)."""

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        candidates = self._matchers.get(environ.get("REQUEST_METHOD", ""))
        if candidates:
            path: str = environ.get("PATH_INFO", "")
            for pattern, route in candidates:
                matched = pattern.fullmatch(path)
                if matched is None:
                    continue
                args = {name: _utf8(value) for name, value in matched.groupdict().items()}
                call = Call(environ, args, lambda: query_args(environ),
                            lambda: self._read(environ), self.limit)
                status, headers, body = envelope.answer(self.context, route, call)
                start_response(status_line(status), headers)
                return [body]
        return self.app(environ, start_response)

    def answer_poller(self, request: PollerRequest) -> PollerAnswer | None:
        """The answer to a request of the poller lane whose body was read already (the
        worker's poller thread calls this, inline.py); None for a call that may wait (its
        route's ``holds``): a thread answers it (DEC-poller-pull)."""
        route = self._poller[request.endpoint]
        holds = route.holds
        if holds is None:  # a produce: no query string (only a GET's is read, inline.py)
            call = Call(request.environ, request.args, _no_query, _over_limit, self.limit,
                        request.body, True)
        else:
            environ = request.environ
            call = Call(environ, request.args, lambda: query_args(environ), _over_limit,
                        self.limit, request.body, True)
            if holds(self.context, call):
                return None
        status, headers, out = envelope.answer(self.context, route, call)
        return status_line(status), headers, out

    def groups(self, request: PollerRequest) -> bool:
        """Whether the request is of a route whose calls ready together on the poller are
        appended as one (a single send, DEC-poller-group-append)."""
        return self._poller[request.endpoint].group is not None

    def answer_poller_group(self, requests: list[PollerRequest]) -> list[PollerAnswer]:
        """The answers to requests of one grouped route (:meth:`groups`), read already: one
        append for all (``envelope.answer_group``), each answered as
        :meth:`answer_poller` would."""
        route = self._poller[requests[0].endpoint]
        limit = self.limit
        calls = [Call(r.environ, r.args, _no_query, _over_limit, limit, r.body, True)
                 for r in requests]
        return [(status_line(status), headers, out) for status, headers, out
                in envelope.answer_group(self.context, route, calls)]

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


def _no_query() -> Mapping[str, str]:
    return _EMPTY


def _over_limit() -> bytes | None:
    """A poller request's body read, when it is not given: it was over the limit (413)."""
    return None


def query_args(environ: Mapping[str, Any]) -> Mapping[str, str]:
    """The query string's parameters as Flask's ``request.args.get`` reads them: decoded
    the same way, the first value of a repeated name."""
    raw: str = environ.get("QUERY_STRING", "")
    if not raw:
        return _EMPTY
    args: dict[str, str] = {}
    for name, value in parse_qsl(raw.encode("latin-1").decode(), keep_blank_values=True,
                                 errors="werkzeug.url_quote"):
        args.setdefault(name, value)
    return args


def _utf8(segment: str) -> str:
    """A PATH_INFO segment ("bytes as latin-1", PEP 3333) decoded as Werkzeug does: UTF-8."""
    return segment.encode("latin-1").decode("utf-8", "replace")
