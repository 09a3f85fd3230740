"""The OpenAPI 3.1 documents, generated: a service's route table (its
``contract`` module: one :class:`Route` per operation) plus the wire types of
:mod:`clepsydra_core.wire` (their JSON Schema from :mod:`clepsydra_core.wire.schema`) make its
``openapi.json``; ``make openapi`` writes them (``python -m tools.openapi``) and a unit test
checks that the checked-in files equal what this module makes, so a document cannot drift
from what the server validates.

Adding a route: one ``Route(...)`` in the service's contract module (its request and answer as
wire types, or as a named schema of the contract's ``schemas`` while the value has no wire type
yet), then ``make openapi``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clepsydra_core.errors import BodyTooLarge
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.schema import nested_types, object_schema

OPENAPI_VERSION = "3.1.0"
JSON_TYPE = "application/json"
ERROR = ErrorAnswer.__name__
"""The component every 4xx/5xx answer has: ``{error, message}`` (DESIGN "HTTP contract"), the
schema of :class:`~clepsydra_core.wire.errors.ErrorAnswer`, the one definition of that body."""
ERROR_TEXT: Mapping[int, str] = {
    400: "invalid input (malformed JSON, a field of the wrong type or out of range, a broken "
         "SPEC rule named in the message); nothing was changed",
    403: "FORBIDDEN (a system topic, S3; or the token's role does not cover the route, the "
         "message naming what is missing) or NO_PERMISSION (writes refused, R2)",
    404: "no such resource (topic, message, group, route), or a queue or offset the topic "
         "does not have (OFFSET_OUT_OF_RANGE)",
    409: "the resource exists with other settings",
    413: f"{BodyTooLarge.code} (SPEC P1): a message body over the largest message size, or the "
         "request body over the service's request limit; nothing was stored",
    414: "URI_TOO_LONG: the request line (path and query) is over the server's limit",
    502: "a service this one calls answered an error",
    503: "a service this one depends on did not answer; try again later",
    507: "the store's disk is over its limit",
}

BEARER = "bearerAuth"
BEARER_SCHEME: dict[str, Any] = {
    "type": "http", "scheme": "bearer",
    "description": "With CLEPSYDRA_AUTH=on every /v1 route needs a token whose role covers it "
                   "(docs/access-control.md): missing or unknown, 401 UNAUTHORIZED; a role "
                   "that does not cover the route, 403 FORBIDDEN naming what is missing; a "
                   "token over its requests a second (its ratePerS, else "
                   "CLEPSYDRA_AUTH_RATE_PER_S), 429 RATE_LIMITED with Retry-After. The "
                   "ops routes (/healthz, /metrics, /openapi.json) stay open. With "
                   "CLEPSYDRA_AUTH=off (the local default) no token is needed."}
"""Access control (docs/access-control.md): the scheme a deployment with ``CLEPSYDRA_AUTH=on``
uses on every ``/v1`` operation, its 401 and 403 described here once. The documents declare no
security requirement and no per-operation 401/403: whether they apply is the deployment's
setting (off locally), and the conformance run (services with auth off) would otherwise expect
refusals or, with the extra answers, meet schemathesis's percent-decoding of generated topics
(see tests/fixtures/schemathesis_hooks.py)."""

Body = type[WireValue] | str | Mapping[str, Any]
"""A wire type, the name of a schema in the contract's ``schemas``, or an inline schema."""


@dataclass(frozen=True, slots=True)
class Param:
    """A path or query parameter."""

    name: str
    schema: Mapping[str, Any]
    doc: str | None = None
    required: bool = False
    example: Any = None


@dataclass(frozen=True, slots=True)
class Answer:
    """One documented answer of an operation (``body`` None: no JSON body)."""

    status: int
    doc: str
    body: Body | None = None
    media: str = JSON_TYPE


@dataclass(frozen=True, slots=True)
class Route:
    """One operation. Error answers (``{error, message}``) are added for what every route of
    its shape can answer - 400 when it takes a body or parameters, 404 when its path has
    parameters, 413 when it takes a body, 414 when it takes parameters (its request line can
    pass the server's limit) - and for the statuses in ``errors``."""

    method: str
    path: str
    operation_id: str
    summary: str
    answers: Sequence[Answer]
    request: Body | None = None
    request_required: bool = True
    query: Sequence[Param] = ()
    headers: Sequence[Param] = ()
    errors: Sequence[int] = ()
    description: str | None = None
    error_text: Mapping[int, str] = field(default_factory=dict)
    """Per-route text of an error status (else :data:`ERROR_TEXT`)."""


def ops_routes(health: Route, metrics: str = "Prometheus text exposition.") -> list[Route]:
    """The routes of the shared ops blueprint (clepsydra_web.ops): the service's own
    ``/healthz`` answer, ``/metrics`` (``metrics``: what it exposes) and ``/openapi.json``."""
    return [health,
            Route("GET", "/metrics", "metrics", metrics,
                  [Answer(200, "Prometheus text exposition", {"type": "string"},
                          media="text/plain")]),
            Route("GET", "/openapi.json", "openapi", "This document.",
                  [Answer(200, "OpenAPI 3.1 document", {"type": "object"})])]


@dataclass(frozen=True, slots=True)
class Api:
    """A service's contract: its routes, the schemas of its path parameters (by name) and the
    schemas of values that are not wire types (yet)."""

    title: str
    version: str
    description: str
    routes: Sequence[Route]
    path_params: Mapping[str, Param]
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    wire_requests: Sequence[type[WireValue]] = ()
    """Wire types the ``schemas`` of requests point at (closed: unknown fields refused)."""
    wire_answers: Sequence[type[WireValue]] = ()
    """Wire types the ``schemas`` of answers point at."""
    servers: Sequence[str] = ()


_PATH_PARAM = re.compile(r"\{([^}]+)\}")


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


class _Builder:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.wire: dict[str, type[WireValue]] = {}
        self.closed: set[type[WireValue]] = set()

    def _add_wire(self, cls: type[WireValue], closed: bool) -> None:
        known = self.wire.get(cls.__name__)
        if known is not None and known is not cls:
            raise ValueError(f"two wire types named {cls.__name__}: {known} and {cls}")
        if known is cls and (not closed or cls in self.closed):
            return
        self.wire[cls.__name__] = cls
        if closed:
            self.closed.add(cls)
        for inner in nested_types(cls):
            self._add_wire(inner, closed)

    def body(self, body: Body, *, request: bool) -> dict[str, Any]:
        if isinstance(body, str):
            if body not in self.api.schemas and body != ERROR:
                raise ValueError(f"schema {body!r} is not in the contract's schemas")
            return _ref(body)
        if isinstance(body, type) and issubclass(body, WireValue):
            self._add_wire(body, closed=request)
            return _ref(body.__name__)
        return dict(body)

    def param(self, where: str, p: Param) -> dict[str, Any]:
        out: dict[str, Any] = {"name": p.name, "in": where,
                               "required": True if where == "path" else p.required,
                               "schema": dict(p.schema)}
        if p.doc:
            out["description"] = p.doc
        if p.example is not None:
            out["example"] = p.example
        return out

    def operation(self, route: Route) -> dict[str, Any]:
        op: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary}
        if route.description:
            op["description"] = route.description
        names = _PATH_PARAM.findall(route.path)
        params = [self.param("path", self.api.path_params[n]) for n in names]
        params += [self.param("query", p) for p in route.query]
        params += [self.param("header", p) for p in route.headers]
        if params:
            op["parameters"] = params
        if route.request is not None:
            op["requestBody"] = {"required": route.request_required, "content": {
                JSON_TYPE: {"schema": self.body(route.request, request=True)}}}
        responses: dict[str, Any] = {}
        for answer in route.answers:
            entry: dict[str, Any] = {"description": answer.doc}
            if answer.body is not None:
                entry["content"] = {answer.media: {
                    "schema": self.body(answer.body, request=False)}}
            responses[str(answer.status)] = entry
        errors = set(route.errors)
        if route.request is not None or params:
            errors.add(400)
        if names:
            errors.add(404)
        if route.request is not None:
            errors.add(413)
        if params:  # path and query values make the request line, which the server caps
            errors.add(414)
        for status in sorted(errors):
            if str(status) in responses:
                continue
            text = route.error_text.get(status) or ERROR_TEXT.get(status, "error")
            responses[str(status)] = {"description": text,
                                      "content": {JSON_TYPE: {"schema": _ref(ERROR)}}}
        op["responses"] = dict(sorted(responses.items()))
        return op

    def document(self) -> dict[str, Any]:
        self._add_wire(ErrorAnswer, closed=False)
        for cls in self.api.wire_requests:
            self._add_wire(cls, closed=True)
        for cls in self.api.wire_answers:
            self._add_wire(cls, closed=False)
        paths: dict[str, dict[str, Any]] = {}
        for route in self.api.routes:
            methods = paths.setdefault(route.path, {})
            method = route.method.lower()
            if method in methods:
                raise ValueError(f"{route.method} {route.path} is declared twice")
            methods[method] = self.operation(route)
        schemas: dict[str, Any] = dict(self.api.schemas)
        for name, cls in self.wire.items():
            if name in schemas:
                raise ValueError(f"schema {name!r} is both a wire type and a contract schema")
            schemas[name] = object_schema(cls, lambda c: _ref(c.__name__),
                                          closed=cls in self.closed)
        doc: dict[str, Any] = {
            "openapi": OPENAPI_VERSION,
            "info": {"title": self.api.title, "version": self.api.version,
                     "description": self.api.description}}
        if self.api.servers:
            doc["servers"] = [{"url": url} for url in self.api.servers]
        doc["paths"] = paths
        doc["components"] = {"schemas": dict(sorted(schemas.items())),
                             "securitySchemes": {BEARER: BEARER_SCHEME}}
        return doc


def build(api: Api) -> dict[str, Any]:
    """The OpenAPI document of ``api``."""
    return _Builder(api).document()


def render(api: Api) -> str:
    """The document as the checked-in ``openapi.json`` holds it."""
    return json.dumps(build(api), indent=2, ensure_ascii=False) + "\n"
