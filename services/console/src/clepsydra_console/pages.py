"""The pages a person reads (GET), at the paths users bookmark: ``/``, ``/messages/<msgId>``,
``/timers``, ``/groups``, ``/groups/<group>``, ``/topics``, ``/topics/<topic>``, ``/dlq``,
``/dlq/<group>``, ``/dlq/<group>/audit``, and the sign-in. Every list is paged and bounded;
every read is a :class:`~clepsydra_console.backend.Lookup`, so "nothing found" and "the
look-up failed" read differently (DEC-console-honest-lists)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, redirect, request, url_for

from clepsydra_client.history_commands import KIND_LABELS, STATE_LABELS, hop_detail
from clepsydra_client.render import format_due, format_duration_ms, format_ts
from clepsydra_console import rates, search
from clepsydra_console.backend import Lookup, look
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
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_core.wire.locks import LockList
from clepsydra_core.wire.messages import MessageList, PullAnswer

bp = Blueprint("pages", __name__)

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
    c = console()
    store, retry = c.store_counters, c.retry_counters
    levels = look(lambda: admin().levels())
    timers = look(lambda: admin().timers())
    pending = None
    if levels.ok and timers.ok:
        assert levels.value is not None and timers.value is not None
        pending = sum(lv.backlog for lv in levels.value) + timers.value.pending
    reports = look(lambda: read_answer(ReportList, analytics().get("/v1/reports")).reports[:5])
    return {"produce_rate": store.rate(rates.PRODUCED), "reports": reports,
            "deliver_rate": store.rate(rates.DELIVERED),
            "dlq_rate": retry.rate(rates.SEND_BACKS, outcome="DLQ"),
            "dlq_depth": retry.value(rates.DLQ_DEPTH),
            "store_error": store.error, "retry_error": retry.error,
            "pending": pending, "pending_error": levels.error or timers.error,
            "store_url": c.settings.store_url}


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
        if len(found.matches) == 1 and not found.errors:
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
    copies = look(lambda: read_answer(MessageList, a.store.get(
        a.store.path("/v1/messages/{}", msg_id))).messages)
    newest = copies.value[-1] if copies.value else None
    preview = body_preview(newest.body, newest.body_base64, newest.body_size) \
        if newest is not None else None
    return page("message.html", msg_id=msg_id, hist=hist, newest=newest, preview=preview,
                actions=_actions(hist.value) if hist.value is not None else None,
                kind_labels=KIND_LABELS, state_labels=STATE_LABELS, hop_detail=hop_detail,
                now_ms=_now_ms())


# ---- what is due when -------------------------------------------------------------------------

@bp.get("/timers")
def timers() -> Any:
    a, c = admin(), console()
    backlog = look(a.timers)
    levels = look(a.levels)
    chart = None
    if backlog.value is not None:
        bars = [Bar(hour_label(h.hour), h.count) for h in backlog.value.by_hour_ahead[:48]]
        chart = bar_chart_svg(bars, title="pending timer messages by hour ahead")
    level_bars = [Bar(str(lv.info.level), lv.backlog) for lv in levels.value or ()
                  if lv.backlog]
    level_chart = bar_chart_svg(level_bars, title="pending level messages by level")
    return page("timers.html", backlog=backlog, levels=levels, chart=chart,
                level_chart=level_chart, hour_label=hour_label,
                handover_rate=c.store_counters.rate(rates.DELIVERED), now_ms=_now_ms())


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
    locks = look(lambda: read_answer(LockList, a.store.get(
        a.store.path("/v1/groups/{}/locks", group))).locks)
    progress = look(lambda: a.progress(group))
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    return page("group.html", group=group, settings=look(lambda: a.group_settings(group)),
                consumers=look(lambda: a.consumers(group)), progress=progress, pg=pg,
                locks=locks, now_ms=_now_ms(),
                retry_rate=retry.rate(rates.SEND_BACKS, group=group, outcome="RETRY"),
                dlq_rate=retry.rate(rates.SEND_BACKS, group=group, outcome="DLQ"),
                dlq_depth=retry.value(rates.DLQ_DEPTH, group=group))


@bp.get("/topics")
def topics() -> Any:
    c = console()
    listing = look(admin().topics)
    pg = Page.of(request.args, c.settings.page_size, PAGE_MAX)
    return page("topics.html", listing=listing, pg=pg,
                rows=(listing.value or [])[pg.offset:pg.offset + pg.size],
                total=len(listing.value or []))


@bp.get("/topics/<topic>")
def topic(topic: str) -> Any:
    a, c = admin(), console()
    info = look(lambda: a.topic(topic))
    queue_id = Page.of({"offset": request.args.get("queue", "0")}, 0, 0).offset
    size = Page.of(request.args, c.settings.page_size, PAGE_MAX).size
    messages: Lookup[PullAnswer] = Lookup(missing=True)
    start = None
    if info.value is not None and info.value.queue(queue_id) is not None:
        q = info.value.queue(queue_id)
        assert q is not None
        default = max(q.min_offset, q.max_offset - size)
        start = Page.of({"offset": request.args.get("offset", str(default))}, 0, 0).offset
        start = max(q.min_offset, min(start, max(q.max_offset - 1, q.min_offset)))
        if q.max_offset > q.min_offset:
            offset = start
            messages = look(lambda: read_answer(PullAnswer, a.store.get(
                a.store.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
                {"offset": offset, "max": size, "body": "false"})))
    return page("topic.html", topic=topic, info=info, queue_id=queue_id, messages=messages,
                start=start, size=size, system=naming.is_system_topic(topic))


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
    found = look(lambda: a.dlq_page(group, pg.offset, pg.size, flt))
    return page("dlq_group.html", group=group, found=found, pg=pg, flt=flt,
                args={k: v for k, v in request.args.items() if k not in ("offset",)},
                actions=ACTIONS)


@bp.get("/dlq/<group>/audit")
def dlq_audit(group: str) -> Any:
    most = Page.of({"max": request.args.get("max", str(AUDIT_STEP))}, AUDIT_STEP,
                   AUDIT_MAX).size
    records = look(lambda: admin().dlq_audit(group, most))
    return page("audit.html", group=group, records=records, most=most,
                more=min(most * 2, AUDIT_MAX) if most < AUDIT_MAX else None)

