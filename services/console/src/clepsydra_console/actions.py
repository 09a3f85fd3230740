"""What a person may do (POST, admin only, CSRF-checked by the app's hook): cancel, reschedule
or "retry now" a pending delayed message; resend a dead letter from its page; resend or purge
dead letters from the DLQ workspace, after a confirmation that says how many, with every
message's outcome listed (DEC-console-per-message-outcome). Sign-out."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, redirect, request, session, url_for

from clepsydra_client.delivery_time import parse_duration_ms, parse_instant_ms
from clepsydra_console import dlq_actions
from clepsydra_console.context import admin, console, page, require_admin, user
from clepsydra_console.pages import dlq_filter
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.timers import MessageCancelled, MessageRescheduled, RescheduleRequest

bp = Blueprint("actions", __name__)

PREVIEW_IDS = 50
"""msgIds a confirmation lists by name (it counts them all)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@bp.post("/logout")
def logout() -> Any:
    console().clients.forget(user().token)
    session.clear()
    return redirect(url_for("pages.login") if console().sign_in.enabled else "/")


def _done(msg_id: str, outcomes: list[dlq_actions.Outcome], what: str) -> str:
    return page("result.html", what=what, outcomes=outcomes, back=url_for(
        "pages.message", msg_id=msg_id), group=None)


def _schedule(msg_id: str, deliver_at: int | None, what: str) -> str:
    """Cancel (``deliver_at`` None) or reschedule, through the store (needs the producer's
    right on the message's topic, which admin has)."""
    store = admin().store
    path = store.path("/v1/messages/{}", msg_id)
    try:
        if deliver_at is None:
            answer = read_answer(MessageCancelled, store.request("DELETE", path))
            text = f"{answer.status}: it will not be delivered"
        else:
            body = RescheduleRequest(deliver_at=deliver_at).to_json()
            moved = read_answer(MessageRescheduled, store.request("PATCH", path, json=body))
            text = f"{moved.status}: due {moved.deliver_at}"
        outcome = dlq_actions.Outcome(msg_id, True, text)
    except ClepsydraError as exc:
        outcome = dlq_actions.Outcome(msg_id, False, f"failed: {exc.message} [{exc.code}]")
    return _done(msg_id, [outcome], what)


@bp.post("/messages/<msg_id>/cancel")
def cancel(msg_id: str) -> Any:
    require_admin()
    return _schedule(msg_id, None, "cancel")


@bp.post("/messages/<msg_id>/reschedule")
def reschedule(msg_id: str) -> Any:
    require_admin()
    at, after = request.form.get("at", "").strip(), request.form.get("in", "").strip()
    try:
        when = parse_instant_ms(at) if at else _now_ms() + parse_duration_ms(after or "x")
    except ValueError as exc:
        return _done(msg_id, [dlq_actions.Outcome(msg_id, False, f"not done: {exc}")],
                     "reschedule")
    return _schedule(msg_id, when, "reschedule")


@bp.post("/messages/<msg_id>/retry-now")
def retry_now(msg_id: str) -> Any:
    """A pending delayed message: due now. A dead letter of a group: resent to the group's
    retry topic at once (level 0)."""
    who = require_admin()
    group = request.form.get("group", "").strip()
    if not group:
        return _schedule(msg_id, _now_ms(), "retry now")
    outcomes = dlq_actions.act(admin(), group, dlq_actions.RESEND_RETRY, [msg_id],
                               who.client_id)
    return _done(msg_id, outcomes, "retry now")


@bp.post("/messages/<msg_id>/resend")
def resend(msg_id: str) -> Any:
    who = require_admin()
    group = request.form.get("group", "").strip()
    action = request.form.get("action", dlq_actions.RESEND_RETRY)
    if action not in (dlq_actions.RESEND_RETRY, dlq_actions.RESEND_ORIGIN):
        action = dlq_actions.RESEND_RETRY
    outcomes = dlq_actions.act(admin(), group, action, [msg_id], who.client_id)
    return _done(msg_id, outcomes, dlq_actions.ACTIONS[action])


def _chosen(group: str) -> tuple[str, dlq_actions.Selection, str]:
    action = request.form.get("action", "")
    if action not in dlq_actions.ACTIONS:
        action = dlq_actions.RESEND_RETRY
    if request.form.get("scope") == "matching":
        chosen = dlq_actions.select_matching(admin(), group, dlq_filter(request.form))
        scope = "every dead letter that matches the filter"
    else:
        ids = list(dict.fromkeys(request.form.getlist("msgId")))
        chosen = dlq_actions.Selection(ids[:dlq_actions.ACTION_MAX],
                                       len(ids) > dlq_actions.ACTION_MAX)
        scope = "the selected dead letters"
    return action, chosen, scope


@bp.post("/dlq/<group>/confirm")
def dlq_confirm(group: str) -> Any:
    require_admin()
    action, chosen, scope = _chosen(group)
    return page("confirm.html", group=group, action=action, label=dlq_actions.ACTIONS[action],
                chosen=chosen, scope=scope, preview=chosen.msg_ids[:PREVIEW_IDS],
                most=dlq_actions.ACTION_MAX)


@bp.post("/dlq/<group>/act")
def dlq_act(group: str) -> Any:
    who = require_admin()
    action = request.form.get("action", "")
    if action not in dlq_actions.ACTIONS:
        return page("result.html", what="nothing", outcomes=[], group=group,
                    back=url_for("pages.dlq_group", group=group))
    ids = list(dict.fromkeys(request.form.getlist("msgId")))[:dlq_actions.ACTION_MAX]
    outcomes = dlq_actions.act(admin(), group, action, ids, who.client_id)
    return page("result.html", what=dlq_actions.ACTIONS[action], outcomes=outcomes,
                group=group, back=url_for("pages.dlq_group", group=group))
