"""HTTP routes (DESIGN "Retry", docs/contracts.md): groups, send-back, DLQ toolkit, ops.
Thin: parse the request, call the service object, return JSON. Errors are raised as
``ClepsydraError`` and turned into ``{error, message}`` by the app's one handler."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
from flask import Blueprint, Response, current_app, g, jsonify, request
from prometheus_client import CollectorRegistry, Histogram
from werkzeug.routing import BaseConverter

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.groups import GroupSettings, validate_settings
from clepsydra_core.msgid import MAX_SHARD
from clepsydra_core.properties import TRACEPARENT
from clepsydra_core.validation import validate_group_name
from clepsydra_core.wire.dlq import FILTER_FIELDS, DlqFilter, DlqPurge
from clepsydra_core.wire.groups import GroupNames, GroupSettingsAnswer
from clepsydra_core.wire.retry import RetryHealth, SendBackItems, SendBackResults
from clepsydra_retry.dlq import DlqToolkit
from clepsydra_retry.dlq_filter import parse_query
from clepsydra_retry.groups import GroupStore
from clepsydra_retry.sendback import SendBackService
from clepsydra_retry.settings import RetrySettings
from clepsydra_retry.store_client import StoreClient
from clepsydra_web import jsonio

LIST_MAX_DEFAULT = 32
LIST_MAX = 1000
AUDIT_MAX_DEFAULT = 100
AUDIT_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Services:
    """What the routes use, built once by ``create_app``."""

    settings: RetrySettings
    redis: redis.Redis
    groups: GroupStore
    store: StoreClient
    send_back: SendBackService
    dlq: DlqToolkit
    registry: CollectorRegistry
    latency: Histogram


def services() -> Services:
    found: Services = current_app.extensions["clepsydra_retry"]
    return found


def json_body(*, empty_ok: bool = False) -> Any:
    """The request's JSON (400 INVALID_JSON when it cannot be read; ``{}`` for an empty body
    when allowed). The one reader every service uses (clepsydra_web.jsonio)."""
    raw = request.get_data(cache=True)
    if empty_ok:
        return jsonio.loads_object_or_empty(raw)
    return jsonio.loads_json(raw)


def query_int(name: str, default: int | None, *, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    """An integer query parameter (ASCII digits); missing: ``default`` (empty: a 400)."""
    if name not in request.args:
        return default
    return jsonio.query_int(request.args, name, 0, minimum=minimum,
                            maximum=jsonio.INT64_MAX if maximum is None else maximum)


def group_name(group: str) -> str:
    return validate_group_name(group)


def client_id() -> str:
    """Who asked (audit): the X-Client-Id header, else the remote address."""
    return (request.headers.get("X-Client-Id") or request.remote_addr or "unknown")[:200]


# ---- groups --------------------------------------------------------------------------------
groups_bp = Blueprint("groups", __name__)


@groups_bp.get("/v1/groups")
def list_groups() -> Response:
    return jsonify(GroupNames(services().groups.names()).to_json())


@groups_bp.put("/v1/groups/<group>")
def put_group(group: str) -> tuple[Response, int]:
    group = group_name(group)
    store = services().groups
    new_settings = validate_settings(json_body(empty_ok=True), store.find(group))
    created = store.put(group, new_settings)
    return jsonify(_settings_answer(group, new_settings)), 201 if created else 200


@groups_bp.get("/v1/groups/<group>")
def get_group(group: str) -> Response:
    group = group_name(group)
    return jsonify(_settings_answer(group, services().groups.get(group)))


def _settings_answer(group: str, settings: GroupSettings) -> dict[str, Any]:
    return GroupSettingsAnswer(group, settings.retry_queue_nums,
                               settings.retry_max_times).to_json()


# ---- send-back -----------------------------------------------------------------------------
sendback_bp = Blueprint("send_back", __name__)


@sendback_bp.post("/v1/groups/<group>/send-back")
def send_back_one(group: str) -> Response:
    group = group_name(group)
    return jsonify(services().send_back.send_back(
        group, json_body(), traceparent=request.headers.get(TRACEPARENT)).to_json())


@sendback_bp.post("/v1/groups/<group>/send-back/batch")
def send_back_batch(group: str) -> Response:
    group = group_name(group)
    batch = SendBackItems.from_json(json_body(), what="send-back batch", strict=True)
    return jsonify(SendBackResults(services().send_back.send_back_many(
        group, batch.items, traceparent=request.headers.get(TRACEPARENT))).to_json())


# ---- DLQ -----------------------------------------------------------------------------------
dlq_bp = Blueprint("dlq", __name__)


class DlqItemConverter(BaseConverter):
    """``/dlq/<msgId>``: any segment but the DLQ's own routes, so ``/dlq/purge`` is not also
    a msgId whose GET would be advertised in its ``Allow``; a segment that is not
    a msgId still reaches the route and is a 400 INVALID_MSG_ID."""

    regex = "(?!(?:purge|resend|audit)$)[^/]+"


def query_filter() -> DlqFilter:
    return parse_query({k: request.args.get(k) for k in FILTER_FIELDS})


@dlq_bp.get("/v1/groups/<group>/dlq")
def list_dlq(group: str) -> Response:
    group = group_name(group)
    offset = query_int("offset", None)
    max_count = query_int("max", LIST_MAX_DEFAULT, minimum=1, maximum=LIST_MAX)
    assert max_count is not None
    shard = query_int("shard", None, maximum=MAX_SHARD)
    return jsonify(services().dlq.list_page(group, offset, max_count, query_filter(),
                                            shard).to_json())


@dlq_bp.get("/v1/groups/<group>/dlq/audit")
def dlq_audit(group: str) -> Response:
    group = group_name(group)
    max_count = query_int("max", AUDIT_MAX_DEFAULT, minimum=1, maximum=AUDIT_MAX)
    assert max_count is not None
    return jsonify(services().dlq.audit(group, max_count).to_json())


@dlq_bp.get("/v1/groups/<group>/dlq/<dlq_item:msg_id>")
def show_dlq(group: str, msg_id: str) -> Response:
    group = group_name(group)
    return jsonify(services().dlq.show(group, msg_id).to_json())


@dlq_bp.post("/v1/groups/<group>/dlq/resend")
def resend_dlq(group: str) -> Response:
    group = group_name(group)
    return jsonify(services().dlq.resend(group, json_body(), client_id()).to_json())


@dlq_bp.post("/v1/groups/<group>/dlq/purge")
def purge_dlq(group: str) -> Response:
    group = group_name(group)
    return jsonify(services().dlq.purge(group, json_body(), client_id()).to_json())


@dlq_bp.delete("/v1/groups/<group>/dlq")
def delete_dlq(group: str) -> Response:
    """Purge all, or what the query selects (filter fields, or repeated ``msgId``)."""
    group = group_name(group)
    msg_ids = request.args.getlist("msgId")
    flt = query_filter()
    if msg_ids:
        body = DlqPurge(msg_ids=msg_ids)
    elif not flt.is_empty():
        body = DlqPurge(filter=flt)
    else:
        body = DlqPurge(all=True)
    return jsonify(services().dlq.purge(group, body.to_json(), client_id()).to_json())


# ---- operations ----------------------------------------------------------------------------
def health() -> tuple[dict[str, Any], int]:
    """``/healthz``: healthy (200) while Redis answers; the store's state is reported."""
    svc = services()
    try:
        redis_ok = bool(svc.redis.ping())
    except redis.RedisError:
        redis_ok = False
    try:
        store_ok, writable = True, svc.store.healthz().writable
    except ClepsydraError:
        store_ok, writable = False, False
    body = RetryHealth("ok" if redis_ok else "degraded", redis_ok, store_ok, writable)
    return body.to_json(), 200 if redis_ok else 503


def start_timer() -> None:
    g.started_s = time.perf_counter()


def observe(response: Response) -> Response:
    started = g.get("started_s")
    rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
    if started is not None:
        services().latency.labels(route=rule).observe(time.perf_counter() - started)
    return response


BLUEPRINTS = (groups_bp, sendback_bp, dlq_bp)
