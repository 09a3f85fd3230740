"""``clepsydra message cancel|reschedule`` and ``clepsydra timers`` (SPEC T1): take back or move
a pending delayed message, by msgId or by key, and see the store's timer backlog; and the
``--at`` / ``--in`` options of ``clepsydra send`` (their forms: delivery_time.py)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from clepsydra_client.cli.commands import Context, Output, UsageError
from clepsydra_client.cli.render import format_due, format_duration_ms, render_fields, render_table
from clepsydra_client.delivery_time import parse_duration_ms, parse_instant_ms
from clepsydra_client.message import ScheduleChange
from clepsydra_client.producer import Producer
from clepsydra_core.wire.timers import TimerBacklog


def at_argument(text: str) -> int:
    """``--at``: epoch ms of an ISO-8601 time with a zone (or of epoch ms)."""
    try:
        return parse_instant_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def in_argument(text: str) -> int:
    """``--in``: ms of a duration such as ``90m``."""
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_time_options(parser: argparse.ArgumentParser, *, required: bool,
                     with_level: bool = False) -> None:
    """``--at TIME`` | ``--in DURATION`` (| ``--delay-level N``): one of them at most (or,
    ``required``, exactly one)."""
    group = parser.add_mutually_exclusive_group(required=required)
    if with_level:
        group.add_argument("--delay-level", type=int, default=0,
                           help="delay level (0: not delayed)")
    group.add_argument("--at", type=at_argument, metavar="TIME", dest="deliver_at",
                       help="deliver at this time: ISO-8601 with Z or an offset "
                            "(2027-01-01T09:00Z), or epoch ms")
    group.add_argument("--in", type=in_argument, metavar="DURATION", dest="delay_ms",
                       help="deliver after this long: 90s, 15m, 2h, 3d (or 1h30m)")


def _target(args: argparse.Namespace) -> dict[str, Any]:
    if args.msg_id and (args.topic or args.key):
        raise UsageError(f"clepsydra message {args.action}: give a MSGID, or --topic T with "
                         "--key K, not both")
    if args.msg_id:
        return {"msg_id": args.msg_id}
    if not (args.topic and args.key):
        raise UsageError(f"clepsydra message {args.action}: give a MSGID, or --topic T with "
                         "--key K (every pending delayed message of T with key K)")
    return {"topic": args.topic, "key": args.key}


def _change_output(change: ScheduleChange, target: dict[str, Any]) -> Output:
    verb = change.status or "done"
    if "msg_id" in target:
        what = change.msg_id or target["msg_id"]
    else:
        n = len(change.msg_ids)
        what = (f"{n} message{'s' if n != 1 else ''} of {target['topic']} with key "
                f"{target['key']} ({', '.join(change.msg_ids)})")
    text = f"{verb} {what}"
    text += (f": due {format_due(change.deliver_at)}" if change.deliver_at is not None
             else ": it will not be delivered")
    return Output(change.to_json(), text)


def message_cancel(args: argparse.Namespace, ctx: Context) -> Output:
    target = _target(args)
    with Producer(ctx.store_url, timeout_s=ctx.timeout_s, token=ctx.token) as producer:
        return _change_output(producer.cancel(**target), target)


def message_reschedule(args: argparse.Namespace, ctx: Context) -> Output:
    target = _target(args)
    with Producer(ctx.store_url, timeout_s=ctx.timeout_s, token=ctx.token) as producer:
        change = producer.reschedule(**target, deliver_at=args.deliver_at, delay=args.delay_ms)
    return _change_output(change, target)


def hours_label(hour: int) -> str:
    """Hour ``h`` ahead as ``h-h+1h`` (hour 0 holds the past-due ones too)."""
    return f"{hour}-{hour + 1}h"


def timers_text(backlog: TimerBacklog, now_ms: int) -> str:
    late = backlog.lateness
    lateness = (f"p50 {format_duration_ms(late.p50)}, p99 {format_duration_ms(late.p99)}, "
                f"max {format_duration_ms(late.max)}" if late is not None
                else "- (no hand-over remembered yet)")
    head = render_fields([("pending", backlog.pending), ("handed over", backlog.handed_over),
                          ("next due", format_due(backlog.next_due_at, now_ms)),
                          ("lateness", lateness)])
    table = render_table(["HOURS AHEAD", "PENDING"],
                         [(hours_label(h.hour), h.count) for h in backlog.by_hour_ahead],
                         right=(1,), empty="(no pending timer)")
    return head + "\n\n" + table


def timers(args: argparse.Namespace, ctx: Context) -> Output:
    admin = ctx.admin()
    now = int(time.time() * 1000)
    backlog = admin.timers()  # its answer says whether the store has peers
    if admin.clustered:  # every store shard's timers (DEC-store-shards)
        by_shard = admin.timers_by_shard()
        return Output({str(shard): b.to_json() for shard, b in by_shard.items()},
                      "\n\n".join(f"store shard {shard}\n{timers_text(b, now)}"
                                  for shard, b in by_shard.items()))
    return Output(backlog.to_json(), timers_text(backlog, now))


def add_timer_commands(sub: Any, message_actions: Any) -> None:
    """``message cancel``, ``message reschedule`` (on the ``message`` sub-command's actions)
    and ``timers`` (on the top level)."""
    for name, fn, text in (
            ("cancel", message_cancel, "take back a pending delayed message (by msgId, or "
                                       "every one of a topic with a key): never delivered"),
            ("reschedule", message_reschedule, "move a pending delayed message to another "
                                               "time (by msgId, or every one of a key)")):
        s = message_actions.add_parser(name, help=text)
        s.add_argument("msg_id", nargs="?", metavar="MSGID")
        s.add_argument("--topic", help="with --key: every pending delayed message of the topic")
        s.add_argument("--key", help="the message key (with --topic)")
        if name == "reschedule":
            add_time_options(s, required=True)
        s.set_defaults(fn=fn)
    t = sub.add_parser("timers", help="the timer backlog by hour ahead, and lateness")
    t.set_defaults(fn=timers)
