"""Requests answered on the store worker's poller thread: the routes of the table's poller
lane (``api/contract.py``: produce, single and batch, DEC-poller-produce; the pull that cannot
wait, DEC-poller-pull).

A single produce costs the store less than gunicorn's own handling of a request: handing the
connection to a pool thread, its parser, the WSGI environ and response objects. So once a
connection is kept alive, the worker's poller thread reads what it sent without blocking and
answers those requests itself (``worker.py``): this module reads them with a strict HTTP/1.1
reader for their request lines (:class:`RequestLines`, built from the route table) and answers
them through the same envelope as every other way in (``api/envelope.py``: access control,
checks, span, metrics, JSON error bodies; :meth:`LeanPath.answer_poller
<clepsydra_store.api.fastpath.LeanPath.answer_poller>`). Several requests that arrived together
(HTTP pipelining) are answered in one write. A client sends the same header fields request after
request, so what the reader made of a head's fields is kept by their bytes
(:data:`FIELDS_CACHE_SIZE`), a ``traceparent`` line (each SDK request's own) read apart. The
single sends that several connections have ready in one pass of the poller are appended as one
batch (:func:`serve_group`,
DEC-poller-group-append): one writer lock, one write, one dispatch for all, each connection
answered with its own message's placement, a refused one alone.

A produce request is read whole here however large its body (a batch: up to
``CLEPSYDRA_STORE_MAX_REQUEST_BYTES``, as a thread would read it): once its head is read,
:attr:`Served.need` says how many bytes the poller reads at once for the rest, and the same
deadline as for any request (``HEAD_DEADLINE_S``) drops a connection that trickles it.

A pull (a ``GET``: its query string taken as it came, no body needed) is answered here only when
it cannot wait (the route's ``holds`` says so before anything of its answer begins); one that
may hold is a thread's, from its first byte, as if the poller had not read it.

Anything else goes to gunicorn unchanged, once it arrived whole (``slow_clients.py``): another
method or route, a percent-encoded path parameter, a query string but a pull's,
``Transfer-Encoding``,
``Expect``, ``Connection: close``, a repeated or unusual header, a head too large for one read,
a body over ``CLEPSYDRA_STORE_MAX_REQUEST_BYTES``. gunicorn's limits and error pages, and
Flask, answer those as before. A store with ``CLEPSYDRA_FLUSH=sync`` does not use this path:
its acknowledgement waits for an fsync, which the poller thread must not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clepsydra_web.slow_clients import READY_BYTES, request_complete

PollerAnswer = tuple[str, list[tuple[str, str]], bytes]
"""(status line, headers, body) of an answer."""

MAX_HEAD_BYTES = 8190
"""A longer request head goes to gunicorn, whose own limits then apply (its defaults: 4094
bytes of request line, 8190 of a header field)."""

_PARAM = re.compile(r"\{(\w+)\}")
_QUERY = "[!\"$-~]*"
"""A query string the poller takes: visible ASCII but ``#`` (a fragment: gunicorn's)."""
# RFC 9110 token characters but "_" (gunicorn drops such headers); a value of visible
# characters, spaces, tabs and obs-text, its surrounding white space not part of it
_FIELD = re.compile(rb"([!#$%&'*+.^`|~0-9A-Za-z-]+):[ \t]*([\t\x20-\x7e\x80-\xff]*)\r\n")
"""A header field: its name, its value with the white space after it (taken off by
:func:`_value`; a lazy match of the value cost a try per character)."""
_REFUSED_FIELDS = frozenset({"TRANSFER-ENCODING", "EXPECT", "UPGRADE", "HTTP2-SETTINGS"})
_DIGITS = re.compile(r"[0-9]{1,18}")


class Verdict:
    """What to do with the rest of the buffer."""

    INCOMPLETE = "incomplete"
    """Not all of the next request arrived: wait for more on the poller."""
    HANDOVER = "handover"
    """The next request (complete, or as much of it as is buffered before a thread reads it)
    is gunicorn's."""


class RequestLines:
    """The request lines the poller reads: ``<METHOD> <path> HTTP/1.1``, one per route given
    as ``(endpoint, method, path template)``, each ``{parameter}`` of the path a plain segment
    (``segment``, a regular expression: what needs no percent-decoding); a ``GET`` route's
    path may be followed by a query string (``?`` and visible ASCII but ``#``: kept as it
    came, ``QUERY_STRING``, as gunicorn does)."""

    def __init__(self, routes: Sequence[tuple[str, str, str]], segment: str) -> None:
        self._lines: dict[str | None, tuple[str, str, tuple[str, ...], tuple[str, ...],
                                            str | None, str | None]] = {}
        """The name of each route's last group -> (endpoint, method, its parameters' names,
        the groups of its path and its parameters, the name of its one parameter when it has
        one and no other, the group of its query string when it takes one)."""
        alternatives = []
        for i, (endpoint, method, path) in enumerate(routes):
            pattern, at, names = "", 0, []
            for param in _PARAM.finditer(path):
                pattern += re.escape(path[at:param.start()])
                pattern += f"(?P<p{i}_{param.group(1)}>{segment})"
                names.append(param.group(1))
                at = param.end()
            pattern += re.escape(path[at:])
            query = f"q{i}" if method == "GET" else None
            alternatives.append(f"{re.escape(method)} (?P<u{i}>{pattern})"
                                + (f"(?:\\?(?P<{query}>{_QUERY}))?" if query else "")
                                + f" HTTP/1\\.1\r\n(?P<r{i}>)")
            self._lines[f"r{i}"] = (endpoint, method, tuple(names),
                                    (f"u{i}", *(f"p{i}_{name}" for name in names)),
                                    names[0] if len(names) == 1 and query is None else None,
                                    query)
        self.pattern = re.compile("|".join(alternatives).encode())

    def match(self, buf: bytes, pos: int
              ) -> tuple[str, str, str, dict[str, str], str, int] | None:
        """(endpoint, method, path, path arguments, query string, where the line ends) of the
        request line at ``buf[pos]``; None when it is not one of the routes'."""
        line = self.pattern.match(buf, pos)
        if line is None:
            return None
        endpoint, method, names, groups, single, query = self._lines[line.lastgroup]
        if single is not None:  # the produce routes' one {topic}: no comprehension per request
            path, value = line.group(*groups)
            return endpoint, method, path.decode("ascii"), {single: value.decode("ascii")}, \
                "", line.end()
        path, *values = line.group(*groups) if len(groups) > 1 else (line.group(groups[0]),)
        args = {name: value.decode("ascii") for name, value in zip(names, values, strict=True)}
        raw_query = line.group(query) if query is not None else None
        return endpoint, method, path.decode("ascii"), args, \
            raw_query.decode("ascii") if raw_query else "", line.end()


_TABLE: list[RequestLines] = []


def table_lines() -> RequestLines:
    """The request lines of the store's route table's poller lane (imported on first use: the
    worker class, loaded by gunicorn's master, must not load the app)."""
    if not _TABLE:
        from clepsydra_store.api.fastpath import poller_lines

        _TABLE.append(poller_lines())
    return _TABLE[0]


@dataclass(slots=True)
class PollerRequest:
    """One request of the poller lane read from the buffer."""

    endpoint: str
    args: dict[str, str]
    """Its path's parameters."""
    environ: dict[str, Any]
    body: bytes | None
    """None: over the request size limit (answered 413 by the envelope)."""


AnswerFn = Callable[[PollerRequest], PollerAnswer | None]
"""The answer to a request of the lane, or None: a thread must answer it (a pull that may
wait, DEC-poller-pull)."""


def read_request(buf: bytes, pos: int, limit: int, remote: tuple[str, int],
                 lines: RequestLines | None = None) -> tuple[PollerRequest | str, int]:
    """The request starting at ``buf[pos]``: (a PollerRequest, where the next one starts), or
    (a :class:`Verdict`, ``pos``); for a request of the lane whose body has not all arrived,
    (INCOMPLETE, the position its body ends at). ``lines``: the route table's by default."""
    head_end = buf.find(b"\r\n\r\n", pos)
    if head_end < 0:
        return (Verdict.HANDOVER if len(buf) - pos >= READY_BYTES
                else Verdict.INCOMPLETE), pos
    line = (lines or table_lines()).match(buf, pos) if head_end - pos <= MAX_HEAD_BYTES \
        else None
    if line is None:
        return _not_ours(buf, pos), pos
    endpoint, method, path, args, query, at = line
    block = buf[at:head_end + 2]
    own = block.find(_OWN_FIELD)  # a traceparent: each request's own (the SDK's)
    if own >= 0 and (own == 0 or block[own - 2:own] == b"\r\n"):
        fields, traceparent = _fields_but_own(block, own)
    else:
        fields, traceparent = _fields_read(block), None
    if fields is _NOT_OURS:
        return _not_ours(buf, pos), pos
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "SERVER_PROTOCOL": "HTTP/1.1", "PATH_INFO": path,
        "QUERY_STRING": query, "REMOTE_ADDR": remote[0], "REMOTE_PORT": str(remote[1])}
    environ.update(fields[0])
    if traceparent is not None:
        environ[_OWN_KEY] = traceparent
    length = fields[1]
    if length < 0:
        if method != "GET":
            return _not_ours(buf, pos), pos
        length = 0  # a pull: no body
    body_start = head_end + 4
    end = body_start + length
    if end > len(buf):
        if length > limit:
            return _not_ours(buf, pos), pos
        return Verdict.INCOMPLETE, end  # read whole here, however large
    return PollerRequest(endpoint, args, environ,
                         None if length > limit else buf[body_start:end]), end


FIELDS_CACHE_SIZE = 256
"""How many distinct header blocks :func:`read_request` keeps read: a client sends the same
fields request after request (its ``Content-Length`` aside, a few values), so each block is
read once, not once a request; a store with more distinct ones starts over when full."""
FIELDS_CACHED_BYTES = 1024
"""A longer header block is read every time (the cache stays under 256 KiB)."""

_FieldsRead = tuple[dict[str, str], int]
"""A header block's environ entries and its ``Content-Length`` (-1: none)."""
_NOT_OURS: _FieldsRead = ({}, -2)
"""A header block a thread must read (gunicorn's rules)."""
_FIELDS_READ: dict[bytes, _FieldsRead] = {}


_OWN_FIELD = b"traceparent:"


def _fields_read(block: bytes) -> _FieldsRead:
    """:func:`_read_fields` of ``block``, read once (:data:`FIELDS_CACHE_SIZE`)."""
    fields = _FIELDS_READ.get(block)
    if fields is None:
        fields = _read_fields(block)
        if len(block) <= FIELDS_CACHED_BYTES:
            if len(_FIELDS_READ) >= FIELDS_CACHE_SIZE:
                _FIELDS_READ.clear()
            _FIELDS_READ[block] = fields
    return fields


def _fields_but_own(block: bytes, at: int) -> tuple[_FieldsRead, str | None]:
    """The fields of ``block`` whose ``traceparent`` line starts at ``at``: the others read
    once (:func:`_fields_read`: the rest of the block is the same request after request), that
    one's value read each time."""
    field = _FIELD.match(block, at)
    if field is None:
        return _NOT_OURS, None
    fields = _fields_read(block[:at] + block[field.end():])
    if _OWN_KEY in fields[0]:  # a repeated header: gunicorn's rules for joining it
        return _NOT_OURS, None
    return fields, _value(field.group(2))


def _value(raw: bytes) -> str:
    """A field's value as :data:`_FIELD` read it, without the white space after it."""
    return raw.rstrip(b" \t").decode("latin-1")


def _read_fields(block: bytes) -> _FieldsRead:
    """The header fields of a request head (``block``: its lines after the request line,
    each ending in CRLF) as environ entries with its ``Content-Length``, or
    :data:`_NOT_OURS`: a field the poller does not take, a repeated one, a bad length."""
    fields: dict[str, str] = {}
    length = -1
    at = 0
    end = len(block)
    match = _FIELD.match
    while at < end:
        field = match(block, at)
        if field is None:
            return _NOT_OURS
        at = field.end()
        raw_name, raw_value = field.groups()
        value = _value(raw_value)
        key = _PLAIN_KEYS.get(raw_name)  # a common header as clients spell it
        if key is None:
            name = raw_name.decode("ascii").upper()
            if name == "CONTENT-LENGTH":
                if length >= 0 or not _DIGITS.fullmatch(value):
                    return _NOT_OURS
                length = int(value)
                key = "CONTENT_LENGTH"
            elif name in _REFUSED_FIELDS or (name == "CONNECTION"
                                             and value.strip().lower() != "keep-alive"):
                return _NOT_OURS
            else:
                key = _environ_key(name)
        if key in fields:  # a repeated header: gunicorn's rules for joining it
            return _NOT_OURS
        fields[key] = value
    return fields, length


def _environ_key(name: str) -> str:
    """The WSGI environ key of a header field (its name upper-cased) that is taken as it
    is: ``CONTENT_TYPE``, else ``HTTP_`` and the name with ``_`` for ``-`` (PEP 3333)."""
    return "CONTENT_TYPE" if name == "CONTENT-TYPE" else "HTTP_" + name.replace("-", "_")


_PLAIN_KEYS = {raw: _environ_key(raw.decode("ascii").upper()) for raw in (
    b"Host", b"host", b"Content-Type", b"content-type", b"Accept", b"accept",
    b"Accept-Encoding", b"accept-encoding", b"User-Agent", b"user-agent", b"traceparent",
    b"tracestate", b"Authorization", b"authorization")}
"""The environ keys of common header fields taken as they are, by their names as clients
spell them (read without decoding and upper-casing the name; any other spelling takes the
long way to the same key)."""
_OWN_KEY = _PLAIN_KEYS[_OWN_FIELD[:-1]]
"""The environ key of the field read apart (:func:`_fields_but_own`)."""


def _not_ours(buf: bytes, pos: int) -> str:
    return Verdict.HANDOVER if request_complete(buf[pos:]) else Verdict.INCOMPLETE


@dataclass(slots=True)
class Served:
    """What :func:`serve` did with a buffer."""

    out: bytes
    """The answers to write, in order."""
    rest: bytes
    """What follows the answered requests."""
    verdict: str
    """:class:`Verdict` of ``rest`` (INCOMPLETE also when it is empty)."""
    count: int
    need: int = 0
    """INCOMPLETE with the head of a produce request read: the bytes of ``rest`` that make it
    whole (the poller reads that much at once); 0 otherwise."""


def serve(buf: bytes, answer: AnswerFn, limit: int, remote: tuple[str, int],
          date: str, lines: RequestLines | None = None) -> Served:
    """Answer the requests of the poller lane at the start of ``buf``, up to the first that is
    incomplete or not ours."""
    out: list[bytes] = []
    pos = 0
    verdict = Verdict.INCOMPLETE
    need = 0
    while pos < len(buf):
        request, end = read_request(buf, pos, limit, remote, lines)
        if not isinstance(request, PollerRequest):
            verdict = request
            if end > pos:
                need = end - pos
            break
        answered = answer(request)
        if answered is None:  # a thread answers it, from its first byte
            verdict = Verdict.HANDOVER
            break
        pos = end
        status, headers, body = answered
        out += (_head(status, headers, date), body)
    return Served(b"".join(out), buf[pos:] if pos else buf, verdict, len(out) // 2, need)


GroupFn = Callable[[list[PollerRequest]], list[PollerAnswer]]
"""The answers to several requests of one grouped route, appended as one
(DEC-poller-group-append)."""


def serve_group(bufs: Sequence[tuple[bytes, tuple[str, int]]], answer: AnswerFn,
                groups: Callable[[PollerRequest], bool], group: GroupFn, limit: int,
                date: str, deliver: Callable[[int, Served], None],
                lines: RequestLines | None = None) -> None:
    """:func:`serve` of several connections' buffers (``(buffer, remote address)``, those
    the poller found readable in one pass), with the first request of each that is of a
    grouped route (:func:`groups`: a single send) answered together (``group``: one append
    for all, DEC-poller-group-append) when there are two or more of them; each buffer's other
    requests after its first, in order, as :func:`serve` answers them. Each buffer's
    :class:`Served` goes to ``deliver`` (with its index) as soon as it is answered: the
    grouped ones first, then the others in order (one buffer's pull of a thousand messages
    does not hold another's answer)."""
    firsts = [read_request(buf, 0, limit, remote, lines) for buf, remote in bufs]
    taken = [i for i, (request, _) in enumerate(firsts)
             if isinstance(request, PollerRequest) and groups(request)]
    endpoint = firsts[taken[0]][0].endpoint if taken else None  # type: ignore[union-attr]
    taken = [i for i in taken if firsts[i][0].endpoint == endpoint]  # type: ignore[union-attr]
    if len(taken) < 2:
        for i, (buf, remote) in enumerate(bufs):
            deliver(i, serve(buf, answer, limit, remote, date, lines))
        return
    answers = group([firsts[i][0] for i in taken])  # type: ignore[misc]
    for i, (status, headers, body) in zip(taken, answers, strict=True):
        buf, remote = bufs[i]
        first = _head(status, headers, date) + body
        end = firsts[i][1]
        if end == len(buf):  # (the common case: one request in the buffer)
            deliver(i, Served(first, b"", Verdict.INCOMPLETE, 1))
            continue
        then = serve(buf[end:], answer, limit, remote, date, lines)
        deliver(i, Served(first + then.out, then.rest, then.verdict, then.count + 1, then.need))
    grouped = set(taken)
    for i, (buf, remote) in enumerate(bufs):
        if i not in grouped:
            deliver(i, serve(buf, answer, limit, remote, date, lines))


def _head(status: str, headers: list[tuple[str, str]], date: str) -> bytes:
    return (f"HTTP/1.1 {status}\r\nDate: {date}\r\nConnection: keep-alive\r\n"
            f"{''.join(map(_FIELD_LINE.__mod__, headers))}\r\n").encode("latin-1")


_FIELD_LINE = "%s: %s\r\n"
"""A header field of an answer, from its (name, value)."""
