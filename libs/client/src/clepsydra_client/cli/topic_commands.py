"""``clepsydra topics list|create|show|update|delete`` (``topic`` is the same command): topics
and their queues on the store (a topic's queue count can change, SPEC A1, and a topic can be
deleted, A2; system topics cannot, S3)."""

from __future__ import annotations

import argparse
from typing import Any

from clepsydra_client.cli.commands import Context, Output, UsageError
from clepsydra_client.cli.render import render_fields, render_table
from clepsydra_client.topics import TopicInfo


def topic_json(t: TopicInfo) -> dict[str, Any]:
    """The topic's JSON; with more than one store shard each queue says its ``shard`` and a
    change says which shards applied it (DEC-store-shards)."""
    sharded = len(t.shard_ids) > 1
    out: dict[str, Any] = {
        "name": t.name, "system": t.system, "messages": t.message_count,
        "queues": [{"queueId": q.queue_id, "minOffset": q.min_offset,
                    "maxOffset": q.max_offset, **({"shard": q.shard} if sharded else {})}
                   for q in t.queues]}
    if t.shards is not None:
        out["shards"] = t.shards.to_json()
    return out


def _applied(t: TopicInfo) -> str:
    """What a change says of the shards (none with one shard)."""
    if t.shards is None:
        return ""
    text = f" (applied on shards {', '.join(map(str, t.shards.applied))}"
    if t.shards.failed:
        text += "; not on " + ", ".join(f"{f.shard} ({f.error}: {f.message})"
                                        for f in t.shards.failed)
        text += ": run it again once they answer"
    return text + ")"


def _queue_count(t: TopicInfo) -> str:
    shards = t.shard_ids
    if len(shards) <= 1:
        return str(len(t.queues))
    return f"{len(t.queues)} ({len(t.queues) // len(shards)} on each of {len(shards)} shards)"


def topics_list(args: argparse.Namespace, ctx: Context) -> Output:
    topics = [t for t in ctx.admin().topics() if args.all or not t.system]
    rows = [(t.name, _queue_count(t), t.message_count, t.system) for t in topics]
    return Output([topic_json(t) for t in topics],
                  render_table(["TOPIC", "QUEUES", "MESSAGES", "SYSTEM"], rows, right=(1, 2),
                               empty="(no topics: create one with `clepsydra topics create "
                                     "NAME --queues 8`)"))


def topics_create(args: argparse.Namespace, ctx: Context) -> Output:
    t = ctx.admin().create_topic(args.name, args.queues)
    return Output(topic_json(t), f"topic {t.name} has {len(t.queues)} queues{_applied(t)}")


def topics_show(args: argparse.Namespace, ctx: Context) -> Output:
    t = ctx.admin().topic(args.name)
    text = render_fields([("topic", t.name), ("queues", _queue_count(t)),
                          ("messages", t.message_count), ("system", t.system)])
    if len(t.shard_ids) > 1:
        rows: list[tuple[Any, ...]] = [(q.shard, q.queue_id, q.min_offset, q.max_offset,
                                        q.count) for q in t.queues]
        text += "\n\n" + render_table(["SHARD", "QUEUE", "MIN OFFSET", "MAX OFFSET",
                                        "MESSAGES"], rows, right=(0, 1, 2, 3, 4))
    else:
        rows = [(q.queue_id, q.min_offset, q.max_offset, q.count) for q in t.queues]
        text += "\n\n" + render_table(["QUEUE", "MIN OFFSET", "MAX OFFSET", "MESSAGES"], rows,
                                      right=(0, 1, 2, 3))
    return Output(topic_json(t), text)


def topics_update(args: argparse.Namespace, ctx: Context) -> Output:
    """Change the queue count, or create the topic (A1): consumers rebalance at their next
    heartbeat."""
    t = ctx.admin().update_topic(args.name, args.queues)
    return Output(topic_json(t), f"topic {t.name} has {len(t.queues)} queues{_applied(t)}")


def topics_delete(args: argparse.Namespace, ctx: Context) -> Output:
    """Delete a topic (A2); without ``--yes`` a usage error (exit 2), nothing deleted."""
    if not args.yes:
        raise UsageError(f"clepsydra topics delete: deleting {args.name} removes its queues and "
                         f"every group's progress on it; run again with --yes to confirm (see "
                         f"it first with `clepsydra topics show {args.name}`)")
    deleted = ctx.admin().delete_topic(args.name)
    out: dict[str, Any] = {"name": args.name, "deleted": True}
    text = f"topic {args.name} deleted"
    if deleted.shards is not None:
        out["shards"] = deleted.shards.to_json()
        text += _applied(TopicInfo(args.name, (), shards=deleted.shards))
    return Output(out, text)


def add_topic_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``topics`` sub-command (alias ``topic``) on the ``clepsydra`` parser."""
    topics = sub.add_parser("topics", aliases=["topic"],
                            help="list, create, show, update and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class,
                                    required=True)
    t = actions.add_parser("list", help="every topic with its queues and message count")
    t.add_argument("--all", action="store_true", help="include system topics")
    t.set_defaults(fn=topics_list)
    t = actions.add_parser("create", help="create a topic")
    t.add_argument("name")
    t.add_argument("--queues", type=int, default=8, help="number of queues (default 8)")
    t.set_defaults(fn=topics_create)
    t = actions.add_parser("show", help="a topic's queues and offsets")
    t.add_argument("name")
    t.set_defaults(fn=topics_show)
    t = actions.add_parser("update", help="change a topic's number of queues (grow, or shrink "
                                          "past queues every group has consumed); a missing "
                                          "topic is created")
    t.add_argument("name")
    t.add_argument("--queues", type=int, required=True, help="the new number of queues")
    t.set_defaults(fn=topics_update)
    t = actions.add_parser("delete", help="delete a topic: its queues and the groups' progress "
                                          "on it (system topics cannot be deleted)")
    t.add_argument("name")
    t.add_argument("--yes", action="store_true", help="confirm")
    t.set_defaults(fn=topics_delete)
