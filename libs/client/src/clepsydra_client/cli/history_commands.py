"""``clepsydra message history MSGID`` (DEC-message-history): a message's lifecycle timeline as
a table (``--json``: the store's answer), and :func:`hop_detail`, the one wording of a hop's
particulars, which the console's timeline shows too."""

from __future__ import annotations

import argparse
from typing import Any

from clepsydra_client.cli.commands import Context, Output
from clepsydra_client.cli.render import format_duration_ms, format_ts, render_fields, render_table
from clepsydra_core.wire import history as H
from clepsydra_core.wire.history import Hop, MessageHistory

KIND_LABELS = {
    H.PRODUCED: "produced", H.PARKED: "parked", H.HANDED_OVER: "handed over",
    H.STORED: "stored", H.SENT_BACK: "sent back", H.RETRY: "retry copy",
    H.DEAD_LETTER: "dead letter", H.RESENT: "resent", H.RESCHEDULED: "rescheduled",
    H.CANCELLED: "cancelled", H.PARKED_ERROR: "parked (error)",
}
"""How each hop kind reads."""
STATE_LABELS = {H.CONSUMED: "consumed", H.NOT_YET: "not consumed yet",
                H.RETRYING: "retrying", H.DEAD: "dead"}
"""How each group state reads (RocketMQ's message track words)."""


def hop_detail(hop: Hop) -> str:
    """What is particular to a hop, in one line: a level or due time, lateness, group,
    attempt, reason, who resent to where, the state of a parked copy."""
    parts: list[str] = []
    if hop.kind == H.PRODUCED and hop.host:
        parts.append(f"from {hop.host}")
    if hop.level is not None:
        parts.append(f"level {hop.level}")
    if hop.deliver_at is not None:
        parts.append(f"due {format_ts(hop.deliver_at)}")
    if hop.real_topic and hop.kind not in (H.PRODUCED,):
        parts.append(f"for {hop.real_topic}")
    if hop.state:
        parts.append(hop.state)
    if hop.lateness_ms is not None:
        parts.append(f"late {format_duration_ms(max(hop.lateness_ms, 0))}")
    if hop.group and hop.kind != H.RETRY:
        parts.append(f"group {hop.group}")
    if hop.kind in (H.SENT_BACK, H.RETRY, H.DEAD_LETTER) and hop.attempt:
        parts.append(f"attempt {hop.attempt}")
    if hop.client:
        parts.append(f"by {hop.client}")
    if hop.target:
        parts.append(f"to {hop.target}")
    if hop.reason:
        parts.append(f"reason: {hop.reason}")
    if hop.kind == H.CANCELLED:
        parts.append("time not recorded")
    return ", ".join(parts)


def _groups_cell(hop: Hop) -> str:
    return " ".join(f"{g.group}:{STATE_LABELS[g.state]}" for g in hop.groups or ())


def history_text(hist: MessageHistory) -> str:
    head = render_fields([("msgId", hist.msg_id), ("topic", hist.topic), ("keys", hist.keys),
                          ("tags", hist.tags), ("copies", hist.copies)])
    rows: list[list[Any]] = [
        [format_ts(h.time), KIND_LABELS[h.kind], h.topic, h.queue_id, h.queue_offset,
         hop_detail(h), _groups_cell(h)] for h in hist.hops]
    table = render_table(["time", "hop", "topic", "queue", "offset", "detail", "groups"],
                         rows, right=(3, 4), max_width=80)
    groups = render_table(["group", "state"],
                          [[g.group, STATE_LABELS[g.state]] for g in hist.groups],
                          empty="(no group has read it)")
    text = f"{head}\n\n{table}\n\ngroups\n{groups}"
    if not hist.complete:
        text += ("\n\nnote: the store holds more copies than one look-up reads; the newest "
                 "are missing")
    return text


def message_history(args: argparse.Namespace, ctx: Context) -> Output:
    hist = ctx.admin().message_history(args.msg_id)
    return Output(hist.to_json(), history_text(hist))


def add_history_command(message_actions: Any) -> None:
    s = message_actions.add_parser(
        "history", help="a message's whole life: every hop in order, each group's state")
    s.add_argument("msg_id", metavar="MSGID")
    s.set_defaults(fn=message_history)
