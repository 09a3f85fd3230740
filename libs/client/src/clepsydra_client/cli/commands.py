"""The ``clepsydra`` sub-commands. Each takes the parsed arguments and a :class:`Context` and
returns an :class:`Output`: the JSON document (``--json``) and its readable text."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from clepsydra_client.admin import AdminClient, LevelStatus, QueueProgress
from clepsydra_client.cli.render import (
    ProgressBar,
    format_delay_ms,
    format_due,
    format_duration_ms,
    format_ts,
    render_fields,
    render_table,
)
from clepsydra_client.consumer.pull_consumer import PullConsumer
from clepsydra_client.consumer.rebalance import DEFAULT_BROKER_NAME, strategy_by_name
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.message import Message
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    ClepsydraError,
    MessageNotFound,
    TopicNotFound,
    ValidationError,
)
from clepsydra_core.wire.dlq import DlqFilter


class UsageError(Exception):
    """argparse found the command line wrong."""


@dataclass
class Context:
    store_url: str
    retry_url: str
    json: bool
    timeout_s: float
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    progress: bool = True
    broker_name: str = DEFAULT_BROKER_NAME
    """The broker name of queues in RocketMQ's form (CLEPSYDRA_CLIENT_BROKER_NAME)."""
    analytics_url: str = "http://127.0.0.1:8085"
    token: str | None = field(default=None, repr=False)
    """--token, else CLEPSYDRA_TOKEN (the HTTP client's own default); never printed."""
    _admin: AdminClient | None = None

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.store_url, self.retry_url, timeout_s=self.timeout_s,
                                      token=self.token)
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def bar(self, label: str, total: int | None) -> ProgressBar:
        return ProgressBar(label, total, stream=self.err, enabled=self.progress and not self.json)


@dataclass(frozen=True)
class Output:
    data: Any
    text: str


Command = Callable[[argparse.Namespace, Context], Output | None]


# ---- send / consume ------------------------------------------------------------------------

def parse_props(items: list[str] | None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValidationError(f"--prop {item!r}: write it as NAME=VALUE")
        props[name] = value
    return props


def _bodies(args: argparse.Namespace) -> Iterator[str]:
    if args.file:
        stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
        with stream:
            for line in stream:
                if line.rstrip("\n"):
                    yield line.rstrip("\n")
        return
    if args.body is None:
        raise ValidationError("give a message body, or --file PATH (one message per line)")
    for i in range(args.count):
        yield args.body.replace("{n}", str(i)) if args.count > 1 else args.body


def send(args: argparse.Namespace, ctx: Context) -> Output:
    props = parse_props(args.prop)
    bodies = list(_bodies(args))
    template = OutgoingMessage("", args.tags, args.keys or (), props, args.delay_level,
                               deliver_at=args.deliver_at, delay=args.delay_ms)
    results = []
    with Producer(ctx.store_url, timeout_s=ctx.timeout_s, token=ctx.token) as producer:
        if len(bodies) == 1:
            results.append(producer.send_message(args.topic, _with_body(template, bodies[0])))
        else:
            with ctx.bar(f"sending to {args.topic}", len(bodies)) as bar:
                for start in range(0, len(bodies), 100):
                    chunk = [_with_body(template, b) for b in bodies[start:start + 100]]
                    results.extend(producer.send_batch(args.topic, chunk))
                    bar.advance(len(chunk))
    data = [{"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "uniqKey": r.uniq_key,
             "topic": r.topic, "queueId": r.queue_id,
             "queueOffset": r.queue_offset,
             **({"deliverAt": r.deliver_at} if r.deliver_at is not None else {})}
            for r in results]
    if len(results) == 1:
        r = results[0]
        where = f"{r.topic} queue {r.queue_id} offset {r.queue_offset}"
        delayed = (f" (delay level {args.delay_level})" if args.delay_level
                   else f", due {format_due(r.deliver_at)}" if r.deliver_at is not None else "")
        return Output(data[0], f"sent {r.msg_id} to {where}{delayed}")
    return Output(data, f"sent {len(results)} messages to {args.topic}")


def _with_body(template: OutgoingMessage, body: str) -> OutgoingMessage:
    return replace(template, body=body)


def message_line(m: Message) -> str:
    body = m.text if len(m.text) <= 80 else m.text[:79] + "…"
    return (f"{format_ts(m.store_timestamp)}  {m.topic}#{m.queue_id}@{m.queue_offset}  "
            f"{m.msg_id}  tags={m.tags or '-'}  keys={' '.join(m.keys) or '-'}  {body}")


def consume(args: argparse.Namespace, ctx: Context) -> None:
    """Tail a topic: print messages as they arrive (no group progress unless --group)."""
    expr = TagExpression.parse(args.tags)
    consumer = PullConsumer(args.group, ctx.store_url, timeout_s=ctx.timeout_s,
                            token=ctx.token)
    topic = consumer.topic(args.topic)
    offsets = {}
    committed = consumer.offsets(args.topic) if args.group else {}
    for q in topic.queues:
        mq = next(m for m in topic.message_queues() if m.queue_id == q.queue_id)
        offsets[mq] = committed.get(mq, q.min_offset if args.from_beginning else q.max_offset)
    shown, idle_since = 0, time.monotonic()
    ctx.err.write(f"tailing {args.topic} ({len(offsets)} queues, tags {expr}); Ctrl-C stops\n")
    while args.count is None or shown < args.count:
        got = False
        for mq, offset in offsets.items():
            result = consumer.pull(mq, offset, args.batch, expr)
            offsets[mq] = result.next_offset
            for m in result.messages:
                got = True
                ctx.out.write((json.dumps(m.to_json()) if ctx.json else message_line(m)) + "\n")
                shown += 1
                if args.count is not None and shown >= args.count:
                    break
            if args.group and result.next_offset > offset:
                consumer.commit(mq, result.next_offset)
            if args.count is not None and shown >= args.count:
                break
        ctx.out.flush()
        if got:
            idle_since = time.monotonic()
        elif args.idle_exit is not None and time.monotonic() - idle_since >= args.idle_exit:
            break
        else:
            time.sleep(0.2)
    ctx.err.write(f"{shown} messages\n")
    return None


# ---- messages ------------------------------------------------------------------------------

def message_json(m: Message) -> dict[str, Any]:
    out = m.to_json()
    out["traceId"] = m.trace_id
    out["originTopic"] = m.origin_topic
    out["originMsgId"] = m.origin_message_id
    out["attempts"] = [a.to_json() for a in m.failure_history]
    return out


def message_text(m: Message, *, full_body: bool = False) -> str:
    body = m.text if full_body or len(m.text) <= 500 else m.text[:500] + "… (--full for all)"
    fields = [
        ("msgId", m.msg_id), ("offsetMsgId", m.offset_msg_id), ("topic", m.topic),
        ("queue", f"{m.queue_id} offset {m.queue_offset}"),
        ("tags", m.tags), ("keys", " ".join(m.keys) or None), ("uniqKey", m.uniq_key),
        ("born", format_ts(m.born_timestamp)), ("stored", format_ts(m.store_timestamp)),
        ("reconsumeTimes", m.reconsume_times), ("trace id", m.trace_id),
    ]
    if m.origin_topic != m.topic or m.origin_message_id != m.msg_id:
        fields += [("origin topic", m.origin_topic), ("origin msgId", m.origin_message_id)]
    if P.DLQ_REASON in m.properties:
        fields.append(("dead-lettered", m.properties[P.DLQ_REASON]))
    text = render_fields(fields)
    props = [(k, v) for k, v in sorted(m.properties.items()) if k != P.FAILURE_HISTORY]
    text += "\n\nproperties\n" + render_table(["NAME", "VALUE"], props, max_width=80)
    text += "\n\nattempts\n" + attempts_table(m)
    return text + "\n\nbody\n" + body


def attempts_table(m: Message) -> str:
    """The failed attempts carried in FAILURE_HISTORY (SPEC R16)."""
    rows = [(i + 1, format_ts(a.time_ms), a.consumer or "-", a.reason)
            for i, a in enumerate(m.failure_history)]
    return render_table(["#", "TIME", "CONSUMER", "REASON"], rows, right=(0,), max_width=80,
                        empty="(no failed attempt recorded)")


def message_life(admin: AdminClient, group: str, first: Message) -> list[Message]:
    """Every copy of a message in a group's retry and dead-letter topics (found by its
    uniqKey), oldest first."""
    key = first.uniq_key or (first.keys[0] if first.keys else None)
    if key is None:
        return []
    copies: dict[str, Message] = {}
    for topic in (naming.retry_topic(group), naming.dlq_topic(group)):
        try:
            for m in admin.messages_by_key(topic, key):
                copies[m.offset_msg_id] = m
        except TopicNotFound:
            continue
    return sorted(copies.values(), key=lambda m: (m.store_timestamp, m.reconsume_times))


def life_table(copies: list[Message], empty: str = "(no retry or dead-letter copy)") -> str:
    return render_table(["STORED", "TOPIC", "RETRIES", "OFFSET MSG ID"],
                        [(format_ts(m.store_timestamp), m.topic, m.reconsume_times,
                          m.offset_msg_id) for m in copies], right=(2,), empty=empty)


def message_show(args: argparse.Namespace, ctx: Context) -> Output:
    admin = ctx.admin()
    if args.msg_id:
        return message_copies_show(admin, args)
    if args.key and args.topic:
        messages = admin.messages_by_key(args.topic, args.key)
    else:
        raise ValidationError("give a msgId, or --key KEY with --topic TOPIC")
    if not messages:
        raise MessageNotFound(f"no message with key {args.key!r} in topic {args.topic} (keys "
                              "match exactly, one of the space-separated keys, or the uniqKey)")
    texts, data = [], []
    for m in messages:
        text, item = message_text(m, full_body=args.full), message_json(m)
        if args.group:
            copies = message_life(admin, args.group, m)
            text += f"\n\nretries in group {args.group}\n" + life_table(copies)
            item["copies"] = [message_json(c) for c in copies]
            if copies:
                item["attempts"] = [a.to_json() for a in copies[-1].failure_history]
                text += "\n\nattempts (latest copy)\n" + attempts_table(copies[-1])
        texts.append(text)
        data.append(item)
    return Output(data, ("\n\n" + "=" * 40 + "\n\n").join(texts))


def message_copies_show(admin: AdminClient, args: argparse.Namespace) -> Output:
    """``message show MSGID``: the message (its newest copy, or the copy whose offsetMsgId was
    given) and every stored copy of it, oldest first (DEC-message-history)."""
    copies = admin.message_copies(args.msg_id)
    named = [m for m in copies if m.offset_msg_id.upper() == args.msg_id.upper()]
    m = (named or copies)[-1]
    text, item = message_text(m, full_body=args.full), message_json(m)
    text += "\n\ncopies (every stored copy, oldest first)\n" + life_table(copies)
    item["copies"] = [message_json(c) for c in copies]
    return Output(item, text)


# ---- groups --------------------------------------------------------------------------------

def progress_json(rows: list[QueueProgress]) -> list[dict[str, Any]]:
    return [{"topic": r.queue.topic, "queueId": r.queue.queue_id, "maxOffset": r.max_offset,
             "committed": r.committed, "lag": r.lag, "owner": r.owner} for r in rows]


def progress_table(rows: list[QueueProgress]) -> str:
    table = render_table(
        ["TOPIC", "QUEUE", "OWNER", "MAX OFFSET", "COMMITTED", "LAG"],
        [(r.queue.topic, r.queue.queue_id, r.owner, r.max_offset, r.committed, r.lag)
         for r in rows], right=(1, 3, 4, 5), empty="(no queues: the group has no live "
                                                    "consumer; name topics with --topic)")
    return table + (f"\ntotal lag {sum(r.lag for r in rows)}" if rows else "")


def groups_list(args: argparse.Namespace, ctx: Context) -> Output:
    names = ctx.admin().groups()
    return Output(names, render_table(["GROUP"], [(n,) for n in names],
                                      empty="(no group: create one with `clepsydra groups "
                                            "settings GROUP --max-retries 16`)"))


def groups_settings(args: argparse.Namespace, ctx: Context) -> Output:
    admin = ctx.admin()
    if args.retry_queues is not None or args.max_retries is not None:
        settings = admin.set_group_settings(args.group, retry_queue_nums=args.retry_queues,
                                            retry_max_times=args.max_retries)
    else:
        settings = admin.group_settings(args.group)
    return Output(settings, render_fields(sorted(settings.items())))


def groups_consumers(args: argparse.Namespace, ctx: Context) -> Output:
    gc = ctx.admin().consumers(args.group)
    now = int(time.time() * 1000)
    rows = [(c.client_id, c.message_model,
             ", ".join(f"{t} [{e}]" for t, e in sorted(c.subscriptions.items())),
             format_duration_ms(now - c.last_heartbeat_ms) + " ago" if c.last_heartbeat_ms
             else "-") for c in gc.consumers]
    text = render_table(["CLIENT ID", "MODEL", "SUBSCRIPTIONS", "LAST HEARTBEAT"], rows,
                        max_width=80, empty="(no live consumer)")
    if not gc.consistent:
        text += ("\n\nWARNING: the consumers of this group subscribe differently (SPEC C5); "
                 f"mismatches: {json.dumps(gc.mismatches)}")
    data = {"consumers": [{"clientId": c.client_id, "messageModel": c.message_model,
                           "subscriptions": c.subscriptions,
                           "lastHeartbeatMs": c.last_heartbeat_ms} for c in gc.consumers],
            "consistent": gc.consistent, "mismatches": gc.mismatches}
    return Output(data, text)


def groups_progress(args: argparse.Namespace, ctx: Context) -> Output:
    strategy = strategy_by_name(args.strategy, broker_name=ctx.broker_name)
    rows = ctx.admin().progress(args.group, args.topic or None, strategy)
    return Output(progress_json(rows), progress_table(rows))


def groups_show(args: argparse.Namespace, ctx: Context) -> Output:
    admin = ctx.admin()
    try:
        settings: dict[str, Any] | str = admin.group_settings(args.group)
    except ClepsydraError as exc:
        settings = f"unavailable ({exc.message})"
    consumers = groups_consumers(args, ctx)
    strategy = strategy_by_name(args.strategy, broker_name=ctx.broker_name)
    rows = admin.progress(args.group, args.topic or None, strategy)
    settings_text = (render_fields(sorted(settings.items())) if isinstance(settings, dict)
                     else settings)
    text = "\n\n".join([f"group {args.group}", "settings\n" + settings_text,
                        "consumers\n" + consumers.text,
                        "queue ownership and progress\n" + progress_table(rows)])
    return Output({"group": args.group, "settings": settings, **consumers.data,
                   "progress": progress_json(rows)}, text)


# ---- dead letters --------------------------------------------------------------------------

def dlq_row(m: Message) -> tuple[Any, ...]:
    history = m.failure_history
    last = history[-1].reason if history else m.properties.get(P.DLQ_REASON)
    return (m.msg_id, m.origin_topic, m.tags, " ".join(m.keys) or None, m.reconsume_times,
            format_ts(m.store_timestamp), last)


def dlq_filter(args: argparse.Namespace) -> DlqFilter | None:
    flt = DlqFilter(topic=args.topic, key=args.key, reason=args.reason)
    return flt if flt.to_json() else None


def dlq_list(args: argparse.Namespace, ctx: Context) -> Output:
    admin = ctx.admin()
    unreachable: set[int] = set()

    def page_seen(page: Any) -> None:
        bar.advance(len(page.messages))
        unreachable.update(page.unreachable)

    with ctx.bar("reading the DLQ", None) as bar:
        messages = list(admin.dlq_messages(args.group, dlq_filter(args), limit=args.limit,
                                           on_page=page_seen))
    empty = f"(no dead letter in {args.group}'s DLQ" + (" matches)" if dlq_filter(args) else ")")
    if any(m.shard for m in messages):  # each row says its store shard (DEC-store-shards)
        text = render_table(["SHARD", "MSG ID", "ORIGIN TOPIC", "TAGS", "KEYS", "RETRIES",
                             "STORED", "LAST FAILURE"], [(m.shard, *dlq_row(m)) for m in messages],
                            right=(0, 5), empty=empty)
        if unreachable:
            text += (f"\nstore shard(s) {', '.join(map(str, sorted(unreachable)))} did not "
                     "answer: their dead letters are not listed")
        return Output([{**message_json(m), "shard": m.shard} for m in messages], text)
    text = render_table(["MSG ID", "ORIGIN TOPIC", "TAGS", "KEYS", "RETRIES", "STORED",
                         "LAST FAILURE"], [dlq_row(m) for m in messages], right=(4,),
                        empty=empty)
    return Output([message_json(m) for m in messages], text)


def dlq_show(args: argparse.Namespace, ctx: Context) -> Output:
    m = ctx.admin().dlq_show(args.group, args.msg_id)
    return Output(message_json(m), message_text(m, full_body=args.full))


def dlq_resend(args: argparse.Namespace, ctx: Context) -> Output:
    flt = dlq_filter(args)
    if not (args.msg_ids or args.all or flt):
        raise ValidationError("say what to resend: msgIds, --all, or a filter (--topic, --key, "
                              "--reason)")
    if args.to_origin and (args.to_retry or args.delay_level):
        raise UsageError("--to-origin goes with neither --to-retry nor --delay-level")
    admin = ctx.admin()
    kw: dict[str, Any] = {"to_origin": args.to_origin, "delay_level": args.delay_level,
                          "max_per_second": args.rate}
    if args.msg_ids:
        resent = skipped = 0
        with ctx.bar("resending", len(args.msg_ids)) as bar:
            for start in range(0, len(args.msg_ids), 100):
                chunk = args.msg_ids[start:start + 100]
                result = admin.dlq_resend(args.group, chunk, **kw)
                resent += result.resent
                skipped += result.skipped
                bar.advance(len(chunk))
        data: dict[str, Any] = {"resent": resent, "skipped": skipped}
    else:
        ctx.err.write("resending (the retry service works through the DLQ)...\n")
        data = admin.dlq_resend(args.group, all_messages=args.all, dlq_filter=flt,
                                **kw).to_json()
    where = ("their original topics (every subscribed group)" if args.to_origin
             else f"the retry topic of {args.group} (this group alone)")
    text = f"resent {data.get('resent', 0)} messages to {where}"
    if data.get("skipped"):
        text += (f"; skipped {data['skipped']} (no original topic, or it no longer exists: "
                 "resend them without --to-origin)")
    return Output(data, text)


def dlq_purge(args: argparse.Namespace, ctx: Context) -> Output:
    flt = dlq_filter(args)
    chosen = [bool(args.msg_ids), bool(flt), args.all]
    if sum(chosen) != 1:
        raise UsageError(f"clepsydra dlq purge: say what to purge, one of: msgIds, a filter "
                         f"(--topic, --key, --reason) or --all (see them first with "
                         f"`clepsydra dlq list {args.group}`)")
    what = ("the messages named" if args.msg_ids else "the dead letters matching the filter"
            if flt else f"every dead letter of {args.group}")
    if not args.yes:
        raise ValidationError(f"purge deletes {what}: run again with --yes to confirm (see them "
                              f"first with `clepsydra dlq list {args.group}`)")
    n = ctx.admin().dlq_purge(args.group, args.msg_ids or None, all_messages=args.all,
                              dlq_filter=flt)
    return Output({"purged": n}, f"purged {n} messages from {args.group}'s DLQ")


def dlq_audit(args: argparse.Namespace, ctx: Context) -> Output:
    records = ctx.admin().dlq_audit(args.group, args.limit)
    keys: list[str] = []
    for r in records:
        keys.extend(k for k in r if k not in keys)
    rows = [[format_ts(r[k]) if k in ("time", "timeMs", "at") and isinstance(r[k], int)
             else r.get(k) for k in keys] for r in records]
    return Output(records, render_table([k.upper() for k in keys], rows, max_width=50,
                                        empty="(no resend or purge recorded)"))


# ---- levels --------------------------------------------------------------------------------

def level_row(lv: LevelStatus, now_ms: int) -> tuple[Any, ...]:
    if lv.next_deliver_ts is None:
        due = "-"
    elif lv.next_deliver_ts > now_ms:
        due = "in " + format_duration_ms(lv.next_deliver_ts - now_ms)
    else:
        due = "due"
    info = lv.info
    return (info.level, format_delay_ms(info.delay_ms), info.queue_id, lv.backlog,
            info.handed_over + 1, info.max_offset, due,
            format_duration_ms(lv.lag_ms) if lv.lag_ms else "0")


def levels(args: argparse.Namespace, ctx: Context) -> Output:
    now = int(time.time() * 1000)
    admin = ctx.admin()
    rows = admin.levels(now)  # its answer says whether the store has peers
    if admin.clustered:  # every store shard's levels (DEC-store-shards)
        by_shard = admin.levels_by_shard(now)
        pairs = [(shard, lv) for shard, levels_of in by_shard.items() for lv in levels_of]
        rows = [lv for _, lv in pairs]
        data = [{**lv.info.to_json(), "shard": shard, "backlog": lv.backlog,
                 "lagMs": lv.lag_ms, "nextDeliverTs": lv.next_deliver_ts} for shard, lv in pairs]
        text = render_table(["SHARD", "LEVEL", "DELAY", "QUEUE", "BACKLOG", "DELIVERED",
                             "STORED", "NEXT DUE", "LAG"],
                            [(shard, *level_row(lv, now)) for shard, lv in pairs],
                            right=(0, 1, 3, 4, 5, 6, 8))
    else:
        data = [{**lv.info.to_json(), "backlog": lv.backlog, "lagMs": lv.lag_ms,
                 "nextDeliverTs": lv.next_deliver_ts} for lv in rows]
        text = render_table(["LEVEL", "DELAY", "QUEUE", "BACKLOG", "DELIVERED", "STORED",
                             "NEXT DUE", "LAG"], [level_row(lv, now) for lv in rows],
                            right=(0, 2, 3, 4, 5, 7))
    if rows:
        text += (f"\ntotal backlog {sum(lv.backlog for lv in rows)}, "
                 f"max lag {format_duration_ms(max(lv.lag_ms for lv in rows))}")
    return Output(data, text)
