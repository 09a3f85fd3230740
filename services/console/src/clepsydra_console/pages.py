"""The pages a person reads (GET), at the paths users bookmark: ``/``, ``/messages/<msgId>``,
``/timers``, ``/groups``, ``/groups/<group>``, ``/topics``, ``/topics/<topic>``, ``/dlq``,
``/dlq/<group>``, ``/dlq/<group>/audit``, and the sign-in. Every list is paged and bounded;
every read is a :class:`~clepsydra_console.backend.Lookup`, so "nothing found" and "the
look-up failed" read differently (DEC-console-honest-lists)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flask import Blueprint, redirect, request, url_for

from clepsydra_client.admin import AdminClient
from clepsydra_client.cli.history_commands import KIND_LABELS, STATE_LABELS, hop_detail
from clepsydra_client.cli.render import format_due, format_duration_ms, format_ts
from clepsydra_console import rates, search, shards
from clepsydra_console.backend import Lookup, each_shard, group_lag, look
from clepsydra_console.context import admin, analytics, console, page
from clepsydra_console.dlq_actions import ACTIONS
from clepsydra_console.login import csrf_ok
from clepsydra_console.settings import PAGE_MAX
from clepsydra_console.views import (
    Bar,
    Page,
    bar_chart_svg,
    body_preview,
    classify_query,
    hour_label,
)
from clepsydra_core import naming
from clepsydra_core.wire import history as H
from clepsydra_core.wire.analytics import ReportList
from clepsydra_core.wire.cluster import UNREACHABLE
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_core.wire.locks import LockHolder, LockList
from clepsydra_core.wire.messages import MessageList, PullAnswer

bp = Blueprint("pages", __name__)
T = TypeVar("T")

AUDIT_STEP = 100
AUDIT_MAX = 10_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@bp.app_template_global()
def ts(ms: int | None) -> str:
    return format_ts(ms)


@bp.app_template_global()
def due(ms: int | None) -> str:
    return format_due(ms)


@bp.app_template_global()
def duration(ms: int | None) -> str:
    return format_duration_ms(ms)


@bp.app_template_global()
def size_text(n: int | None) -> str:
    return shards.size_text(n)


@bp.app_template_global()
def per_s(value: float | None) -> str:
    return "measuring (reload in a few seconds)" if value is None else f"{value:.2f}/s"


# ---- sign-in ----------------------------------------------------------------------------------

def _safe_next(raw: str | None) -> str:
    """Only a path of this console (never another site) to go on to after signing in."""
    parts = urlsplit(raw or "/")
    if parts.scheme or parts.netloc or not (raw or "/").startswith("/") or \
            (raw or "").startswith("//"):
        return "/"
    return raw or "/"


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    c = console()
    if not c.sign_in.enabled:
        return redirect("/")
    why = None
    if request.method == "POST":
        if not csrf_ok():
            why = "the form expired: sign in again"
        else:
            why = c.sign_in.sign_in(request.form.get("token", ""))
            if why is None:
                return redirect(_safe_next(request.form.get("next")))
    return page("login.html", error=why, next=_safe_next(request.values.get("next")),
                anonymous=True)


# ---- the front page ---------------------------------------------------------------------------

def _glance() -> dict[str, Any]:
    c, a = console(), admin()
    retry = c.retry_counters
    reports = look(lambda: read_answer(ReportList, analytics().get("/v1/reports")).reports[:5])
    out: dict[str, Any] = {
        "reports": reports, "dlq_rate": retry.rate(rates.SEND_BACKS, outcome="DLQ"),
        "dlq_depth": retry.value(rates.DLQ_DEPTH), "retry_error": retry.error,
        "store_url": c.settings.store_url, "cluster": None}
    if a.clustered:
        return {**out, **_cluster_glance(a)}
    store = c.store_counters
    levels = look(lambda: a.levels())
    timers = look(lambda: a.timers())
    pending = None
    if levels.ok and timers.ok:
        assert levels.value is not None and timers.value is not None
        pending = sum(lv.backlog for lv in levels.value) + timers.value.pending
    return {**out, "produce_rate": store.rate(rates.PRODUCED),
            "deliver_rate": store.rate(rates.DELIVERED), "store_error": store.error,
            "pending": pending, "pending_error": levels.error or timers.error}


def _cluster_glance(a: AdminClient) -> dict[str, Any]:
    """More than one store shard (DEC-console-shards): the shards table (``GET /v1/cluster``),
    pending delayed messages summed over the shards, the store's rates summed over every
    shard's counters; a shard that did not answer is named and the figures marked partial."""
    found = look(a.cluster)
    view = shards.cluster_view(found.value) if found.value is not None else None
    urls = [s.url for s in view.shards if s.state == "up"] if view is not None else []
    produced = console().shard_counters.rate(urls, rates.PRODUCED)
    delivered = console().shard_counters.rate(urls, rates.DELIVERED)
    errors = sorted(set(produced.errors + delivered.errors))
    return {"cluster": view, "cluster_error": found.error,
            "pending": view.pending_delayed if view is not None else None,
            "pending_error": found.error, "produce_rate": produced.value,
            "deliver_rate": delivered.value,
            "store_error": "; ".join(errors) if errors else None}


@bp.get("/")
def index() -> Any:
    q = classify_query(request.args.get("q"))
    topic = (request.args.get("topic") or "").strip() or None
    found: search.Found | None = None
    if q.kind != "empty":
        c, a = console(), admin()
        found = search.Found()
        if q.kind == "id":
            search.by_id(a, q, found)
            found.looked_at = f"msgId {q.text}"
        if q.kind == "key" or (q.kind == "id" and not found.matches and q.trace_id is None):
            search.by_key(a, q.text, topic, c.settings.search_topics_max, found)
        if not found.matches and q.trace_id is not None and not found.errors:
            search.by_trace(a, q.trace_id, topic, c.settings.search_topics_max,
                            c.settings.scan_messages_max, found)
        if len(found.matches) == 1 and not found.errors and (
                q.kind == "id" or not found.unreachable):  # a shard down: more may exist
            return redirect(url_for("pages.message", msg_id=found.matches[0].msg_id))
    return page("index.html", q=q, topic=topic or "", found=found, glance=_glance())


# ---- a message's life -------------------------------------------------------------------------

def _actions(hist: H.MessageHistory) -> dict[str, Any]:
    """What may be done to the message now: cancel/reschedule while a parked copy is pending,
    resend while a group's last copy is a dead letter."""
    pending = any(h.state == H.PENDING for h in hist.hops)
    dead = [g.group for g in hist.groups if g.state == H.DEAD]
    return {"pending": pending, "dead_groups": dead}


@bp.get("/messages/<msg_id>")
def message(msg_id: str) -> Any:
    a = admin()
    hist = look(lambda: a.message_history(msg_id))
    found = look(lambda: read_answer(MessageList, a.store.get(
        a.store.path("/v1/messages/{}", msg_id))))
    copies = found.value.messages if found.value is not None else []
    newest = copies[-1] if copies else None
    preview = body_preview(newest.body, newest.body_base64, newest.body_size) \
        if newest is not None else None
    return page("message.html", msg_id=msg_id, hist=hist, newest=newest, preview=preview,
                actions=_actions(hist.value) if hist.value is not None else None,
                kind_labels=KIND_LABELS, state_labels=STATE_LABELS, hop_detail=hop_detail,
                now_ms=_now_ms(), partial=shards.partial_text(
                    found.value.unreachable or [] if found.value is not None else [],
                    "copies listed"))


# ---- what is due when -------------------------------------------------------------------------

@bp.get("/timers")
def timers() -> Any:
    """Pending timers by hour ahead and level messages by level, summed over every store shard,
    with each shard's own line when there is more than one (DEC-console-shards)."""
    a, c = admin(), console()
    per_shard: list[shards.ShardTimers] = []
    partial = None
    if a.clustered:
        timer_reads = each_shard(a, lambda shard, _http: a.timers(shard=shard))
        level_reads = each_shard(a, lambda shard, _http: shards.level_rows(
            a.levels(shard=shard)))
        backlog = _merged(timer_reads, shards.merge_timers)
        levels = _merged(level_reads, shards.merge_levels)
        per_shard = shards.shard_timers(timer_reads, level_reads)
        partial = shards.partial_text(sorted(set(shards.unread(timer_reads))
                                             | set(shards.unread(level_reads))))
        rate = c.shard_counters.rate([m.url for m in a.router.members()], rates.DELIVERED).value
    else:
        backlog = look(a.timers)
        levels = look(lambda: shards.level_rows(a.levels()))
        rate = c.store_counters.rate(rates.DELIVERED)
    chart = None
    if backlog.value is not None:
        bars = [Bar(hour_label(h.hour), h.count) for h in backlog.value.by_hour_ahead[:48]]
        chart = bar_chart_svg(bars, title="pending timer messages by hour ahead")
    level_bars = [Bar(str(lv.level), lv.backlog) for lv in levels.value or () if lv.backlog]
    level_chart = bar_chart_svg(level_bars, title="pending level messages by level")
    return page("timers.html", backlog=backlog, levels=levels, chart=chart,
                level_chart=level_chart, hour_label=hour_label, handover_rate=rate,
                now_ms=_now_ms(), clustered=a.clustered, per_shard=per_shard,
                partial=partial)


def _merged(reads: list[shards.ShardRead[T]], merge: Callable[[list[T]], Any]) -> Lookup[Any]:
    """The shards' reads that answered, merged; the first failure when none answered."""
    got = [r.value for r in reads if r.value is not None]
    if not got:
        return Lookup(error=next((r.error for r in reads if r.error), "no store shard"))
    return Lookup(merge(got))


# ---- groups and topics ------------------------------------------------------------------------

@bp.get("/groups")
def groups() -> Any:
    c = console()
    listing = look(admin().groups)
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    names = (listing.value or [])[pg.offset:pg.offset + pg.size]
    retry = c.retry_counters
    rows = [{"group": g, "dlq_depth": retry.value(rates.DLQ_DEPTH, group=g),
             "retry_rate": retry.rate(rates.SEND_BACKS, group=g, outcome="RETRY"),
             "dlq_rate": retry.rate(rates.SEND_BACKS, group=g, outcome="DLQ")} for g in names]
    return page("groups.html", listing=listing, rows=rows, pg=pg,
                total=len(listing.value or []))


@bp.get("/groups/<group>")
def group(group: str) -> Any:
    a, c = admin(), console()
    retry = c.retry_counters
    clustered = a.clustered
    partial = None
    if clustered:  # each queue's lag and each lock read from its own shard
        lag = look(lambda: group_lag(a, group))
        progress: Lookup[list[shards.LagRow]] = Lookup(lag.value.rows) \
            if lag.value is not None else Lookup(error=lag.error, missing=lag.missing)
        lock_reads = each_shard(a, lambda shard, http: [(shard, lock) for lock in read_answer(
            LockList, http.get(http.path("/v1/groups/{}/locks", group))).locks])
        locks: Lookup[list[tuple[int, LockHolder]]] = _merged(
            lock_reads, lambda parts: [x for part in parts for x in part])
        missing = set(lag.value.unreachable if lag.value else ()) | set(
            shards.unread(lock_reads))
        notes = [shards.partial_text(sorted(missing), "lag and locks")] + (
            lag.value.errors if lag.value else [])
        partial = "; ".join(n for n in notes if n) or None
    else:
        progress = look(lambda: [shards.LagRow(r.queue.topic, r.queue.shard, r.queue.queue_id,
                                               r.max_offset, r.committed, r.owner)
                                 for r in a.progress(group)])
        locks = look(lambda: [(0, lock) for lock in read_answer(LockList, a.store.get(
            a.store.path("/v1/groups/{}/locks", group))).locks])
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    return page("group.html", group=group, settings=look(lambda: a.group_settings(group)),
                consumers=look(lambda: a.consumers(group)), progress=progress, pg=pg,
                locks=locks, now_ms=_now_ms(), clustered=clustered, partial=partial,
                retry_rate=retry.rate(rates.SEND_BACKS, group=group, outcome="RETRY"),
                dlq_rate=retry.rate(rates.SEND_BACKS, group=group, outcome="DLQ"),
                dlq_depth=retry.value(rates.DLQ_DEPTH, group=group))


@bp.get("/topics")
def topics() -> Any:
    c, a = console(), admin()
    listing = look(a.topics)
    partial = None
    if a.clustered:  # a shard that did not answer has its queues listed, its messages not
        cluster = look(lambda: a.cluster(shares=False))
        down = [s.id for s in cluster.value.shards if s.state == UNREACHABLE] \
            if cluster.value is not None else []
        partial = shards.partial_text(down, "message counts") or (
            f"the shards' states could not be read ({cluster.error})" if cluster.error
            else None)
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    return page("topics.html", listing=listing, pg=pg,
                rows=(listing.value or [])[pg.offset:pg.offset + pg.size],
                total=len(listing.value or []), partial=partial)


@bp.get("/topics/<topic>")
def topic(topic: str) -> Any:
    """A topic's queues, as (shard, queueId) with more than one store shard (each queue's
    offsets from its shard, a shard that did not answer said so), and one queue's recent
    messages, pulled from its shard."""
    a, c = admin(), console()
    clustered = a.clustered
    partial = None
    if clustered:
        route = look(lambda: a.route(topic))
        info: Lookup[list[shards.QueueRow]] = Lookup(shards.route_rows(route.value)) \
            if route.value is not None else Lookup(error=route.error, missing=route.missing)
        partial = shards.route_partial(route.value) if route.value is not None else None
    else:
        one = look(lambda: a.topic(topic))
        info = Lookup([shards.QueueRow(0, q.queue_id, q.min_offset, q.max_offset)
                       for q in one.value.queues]) if one.value is not None else \
            Lookup(error=one.error, missing=one.missing)
    queue_id = Page.of({"offset": request.args.get("queue", "0")}, 0, 0).offset
    shard = Page.of({"offset": request.args.get("shard", "0")}, 0, 0).offset
    size = Page.of(request.args, c.settings.page_size, PAGE_MAX).size
    messages: Lookup[PullAnswer] = Lookup(missing=True)
    start = None
    q = next((r for r in info.value or () if r.queue_id == queue_id and r.shard == shard), None)
    if q is not None and not q.reachable:
        messages = Lookup(error=f"store shard {shard} did not answer")
    elif q is not None and q.min_offset is not None and q.max_offset is not None:
        low, high = q.min_offset, q.max_offset
        default = max(low, high - size)
        start = Page.of({"offset": request.args.get("offset", str(default))}, 0, 0).offset
        start = max(low, min(start, max(high - 1, low)))
        if high > low:
            offset = start
            http = a.router.client(shard) if clustered else a.store
            messages = look(lambda: read_answer(PullAnswer, http.get(
                http.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
                {"offset": offset, "max": size, "body": "false"})))
    return page("topic.html", topic=topic, info=info, queue_id=queue_id, shard=shard,
                messages=messages, start=start, size=size, clustered=clustered,
                partial=partial, system=naming.is_system_topic(topic))


# ---- dead letters -----------------------------------------------------------------------------

def dlq_filter(args: Any) -> DlqFilter:
    """The DLQ filter of a page's query or form (empty fields left out; times as epoch ms or
    ``YYYY-mm-ddTHH:MM`` local time of the browser's form)."""
    def text(name: str) -> str | None:
        value = (args.get(name) or "").strip()
        return value or None

    return DlqFilter(topic=text("topic"), key=text("key"), reason=text("reason"),
                     from_ms=_time_ms(text("fromMs")), to_ms=_time_ms(text("toMs")))


def _time_ms(raw: str | None) -> int | None:
    if raw is None:
        return None
    if raw.isdigit():
        return int(raw)
    try:
        return int(time.mktime(time.strptime(raw[:16], "%Y-%m-%dT%H:%M")) * 1000)
    except ValueError:
        return None


@bp.get("/dlq")
def dlq() -> Any:
    group = (request.args.get("group") or "").strip()
    if group:
        args: dict[str, Any] = {k: v for k, v in request.args.items() if k != "group" and v}
        return redirect(url_for("pages.dlq_group", group=group, **args))
    c = console()
    listing = look(admin().groups)
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    names = (listing.value or [])[pg.offset:pg.offset + pg.size]
    rows = [{"group": g, "depth": c.retry_counters.value(rates.DLQ_DEPTH, group=g),
             "inflow": c.retry_counters.rate(rates.SEND_BACKS, group=g, outcome="DLQ")}
            for g in names]
    return page("dlq.html", listing=listing, rows=rows, pg=pg, total=len(listing.value or []),
                retry_error=c.retry_counters.error)


@bp.get("/dlq/<group>")
def dlq_group(group: str) -> Any:
    a, c = admin(), console()
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    flt = dlq_filter(request.args)
    raw_shard = request.args.get("shard", "")
    shard = int(raw_shard) if raw_shard.isdigit() else None  # more than one store shard
    found = look(lambda: a.dlq_page(group, pg.offset, pg.size, flt, shard))
    partial = shards.partial_text(list(found.value.unreachable), "dead letters listed") \
        if found.value is not None else None
    return page("dlq_group.html", group=group, found=found, pg=pg, flt=flt, shard=shard,
                args={k: v for k, v in request.args.items() if k not in ("offset", "shard")},
                actions=ACTIONS, partial=partial)


@bp.get("/dlq/<group>/audit")
def dlq_audit(group: str) -> Any:
    most = Page.of({"max": request.args.get("max", str(AUDIT_STEP))}, AUDIT_STEP,
                   AUDIT_MAX).size
    records = look(lambda: admin().dlq_audit(group, most))
    return page("audit.html", group=group, records=records, most=most,
                more=min(most * 2, AUDIT_MAX) if most < AUDIT_MAX else None)

