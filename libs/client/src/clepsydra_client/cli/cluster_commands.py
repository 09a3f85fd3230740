"""``clepsydra cluster`` (the store shards: membership, health, each one's share of the data),
``clepsydra cluster drain ID`` and ``clepsydra cluster resume ID`` (DEC-store-shards,
DEC-shard-drain)."""

from __future__ import annotations

import argparse
from typing import Any

from clepsydra_client.cli.commands import Context, Output
from clepsydra_client.cli.render import render_table
from clepsydra_core.wire.cluster import UNREACHABLE, ClusterAnswer, ShardStatus


def _mib(value: int | None) -> str | None:
    return None if value is None else f"{value / (1 << 20):.1f}"


def _state(s: ShardStatus) -> str:
    if s.state == UNREACHABLE:
        return "UNREACHABLE"
    if s.draining:
        return "removable" if s.removable else "draining"
    return "up" if s.writable else "read-only"


def cluster_table(answer: ClusterAnswer) -> str:
    rows = [(s.id, _state(s), s.url, s.topics, s.queues, _mib(s.commitlog_bytes),
             s.pending_delayed, s.unconsumed, s.dead_letters) for s in answer.shards]
    table = render_table(["SHARD", "STATE", "URL", "TOPICS", "QUEUES", "COMMITLOG MiB",
                          "DELAYED", "UNCONSUMED", "DEAD LETTERS"], rows,
                         right=(0, 3, 4, 5, 6, 7, 8), max_width=48)
    notes = [f"shard {s.id}: {s.error}" for s in answer.shards if s.error]
    draining = [s for s in answer.shards if s.draining and not s.removable]
    if draining:
        notes.append("draining: new messages go to the other shards; removable once nothing "
                     "delayed waits on it and every group consumed its queues")
    removable = [s.id for s in answer.shards if s.removable]
    if removable:
        notes.append(f"removable: shard(s) {', '.join(map(str, removable))} (their dead letters "
                     "and history go with them)")
    return table + "".join(f"\n{n}" for n in notes)


def cluster_show(_args: argparse.Namespace, ctx: Context) -> Output:
    answer = ctx.admin().cluster()
    return Output(answer.to_json(), cluster_table(answer))


def _shard_line(s: ShardStatus, verb: str) -> str:
    return (f"store shard {s.id} {verb}: {_state(s)} (delayed {s.pending_delayed}, unconsumed "
            f"{s.unconsumed})")


def cluster_drain(args: argparse.Namespace, ctx: Context) -> Output:
    s = ctx.admin().drain(args.shard)
    return Output(s.to_json(), _shard_line(s, "drains") + ": `clepsydra cluster` shows when "
                  "it is removable")


def cluster_resume(args: argparse.Namespace, ctx: Context) -> Output:
    s = ctx.admin().resume(args.shard)
    return Output(s.to_json(), _shard_line(s, "takes messages again"))


def add_cluster_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``cluster`` sub-command on the ``clepsydra`` parser."""
    c = sub.add_parser("cluster", help="the store shards: health and share of the data; drain "
                                       "or resume one")
    c.set_defaults(fn=cluster_show)
    actions = c.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class)
    a = actions.add_parser("show", help="every shard (the default)")
    a.set_defaults(fn=cluster_show)
    a = actions.add_parser("drain", help="a shard refuses new messages while its consumers, "
                                         "levels and timers drain")
    a.add_argument("shard", type=int)
    a.set_defaults(fn=cluster_drain)
    a = actions.add_parser("resume", help="a drained shard takes new messages again")
    a.add_argument("shard", type=int)
    a.set_defaults(fn=cluster_resume)
