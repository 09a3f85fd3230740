"""``clepsydra``: the command line over every Clepsydra API.

    clepsydra topics list | create NAME [--queues N] | show NAME | update NAME --queues N
                   | delete NAME --yes        (`clepsydra topic ...` is the same)
    clepsydra send TOPIC BODY [--tags T] [--keys K ...] [--prop NAME=VALUE ...]
                   [--delay-level N | --at TIME | --in DURATION]
    clepsydra consume TOPIC [--tags 'a || b'] [--from-beginning] [--count N]
    clepsydra message show MSGID | --key KEY --topic TOPIC
    clepsydra message history MSGID   (every hop of its life, each group's state; --json)
    clepsydra message cancel|reschedule MSGID | --topic TOPIC --key KEY  (reschedule: --at|--in)
    clepsydra groups list | show|settings|consumers|progress GROUP
    clepsydra dlq list|show|resend|purge|audit GROUP ...
    clepsydra levels
    clepsydra timers
    clepsydra report run [--job NAME ...] [--since 2h] [--format json] | list | show RUN_ID
    clepsydra export status
    clepsydra k8s status | scale workers N | report-now   (cluster via kubeconfig)

Where the services are: ``--store-url`` / ``--retry-url``, else ``CLEPSYDRA_STORE_URL`` /
``CLEPSYDRA_RETRY_URL``; the analytics service: ``--analytics-url``, else
``CLEPSYDRA_ANALYTICS_URL``. ``--json`` prints JSON for scripts. Errors print what to do, and the
exit status is 1 (2 for a usage error, 130 after Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from clepsydra_client.cli import commands as c
from clepsydra_client.cli import k8s_commands
from clepsydra_client.cli.analytics_commands import AnalyticsUnavailable, add_analytics_commands
from clepsydra_client.cli.auth_commands import add_auth_commands
from clepsydra_client.cli.cluster_commands import add_cluster_commands
from clepsydra_client.cli.commands import UsageError
from clepsydra_client.cli.history_commands import add_history_command
from clepsydra_client.cli.timer_commands import add_time_options, add_timer_commands
from clepsydra_client.cli.topic_commands import add_topic_commands
from clepsydra_client.consumer.rebalance import STRATEGIES
from clepsydra_client.settings import ClientSettings
from clepsydra_core.errors import (
    AlreadyDelivered,
    ClepsydraError,
    ConfigError,
    Forbidden,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    TopicNotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
)


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() decides what is printed."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> Parser:
    p = Parser(prog="clepsydra", description="Delayed messages, consumer retry and dead letters.")
    p.add_argument("--store-url", help="store service URL (CLEPSYDRA_STORE_URL)")
    p.add_argument("--retry-url", help="retry service URL (CLEPSYDRA_RETRY_URL)")
    p.add_argument("--analytics-url", help="analytics service URL (CLEPSYDRA_ANALYTICS_URL)")
    p.add_argument("--token", help="bearer token for the services (CLEPSYDRA_TOKEN); never "
                                    "printed")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--timeout", type=float, help="seconds to wait for a service answer")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    add_topic_commands(sub, Parser)

    s = sub.add_parser("send", help="send messages")
    s.add_argument("topic")
    s.add_argument("body", nargs="?", help="message body ({n} is the index with --count)")
    s.add_argument("--tags", help="the message's tag")
    s.add_argument("--keys", nargs="+", metavar="KEY", help="message keys (for lookups)")
    s.add_argument("--prop", action="append", metavar="NAME=VALUE", help="a user property")
    add_time_options(s, required=False, with_level=True)
    s.add_argument("--count", type=int, default=1, help="send the body this many times")
    s.add_argument("--file", help="send each line of a file as one message ('-': stdin)")
    s.set_defaults(fn=c.send)

    s = sub.add_parser("consume", help="tail a topic: print messages as they arrive")
    s.add_argument("topic")
    s.add_argument("--tags", default="*", help="tag expression: '*' or 'a || b'")
    s.add_argument("--group", help="commit progress for this group (default: none)")
    s.add_argument("--from-beginning", action="store_true",
                   help="start at the oldest message (default: only new ones)")
    s.add_argument("--count", type=int, help="stop after this many messages")
    s.add_argument("--idle-exit", type=float, metavar="SECONDS",
                   help="stop after this long without a message")
    s.add_argument("--batch", type=int, default=32, help="messages per pull")
    s.set_defaults(fn=c.consume)

    msg = sub.add_parser("message", help="look a message up").add_subparsers(
        dest="action", metavar="ACTION", parser_class=Parser, required=True)
    s = msg.add_parser("show", help="a message by msgId, or by key in a topic")
    s.add_argument("msg_id", nargs="?")
    s.add_argument("--key")
    s.add_argument("--topic")
    s.add_argument("--group", help="also show its retry and dead-letter copies in this group")
    s.add_argument("--full", action="store_true", help="print the whole body")
    s.set_defaults(fn=c.message_show)
    add_timer_commands(sub, msg)
    add_history_command(msg)

    groups = sub.add_parser("groups", help="consumer groups").add_subparsers(
        dest="action", metavar="ACTION", parser_class=Parser, required=True)
    for name, fn, text in (("show", c.groups_show, "settings, consumers, ownership, progress"),
                           ("progress", c.groups_progress, "queue ownership, progress and lag")):
        g = groups.add_parser(name, help=text)
        g.add_argument("group")
        g.add_argument("--topic", action="append", help="topic (default: the subscriptions)")
        g.add_argument("--strategy", default="average", choices=sorted(STRATEGIES),
                       help="allocation strategy the consumers use (for ownership)")
        g.set_defaults(fn=fn)
    g = groups.add_parser("list", help="groups with retry settings")
    g.set_defaults(fn=c.groups_list)
    g = groups.add_parser("settings", help="show or change retry settings")
    g.add_argument("group")
    g.add_argument("--retry-queues", type=int, help="retry queues (0: failures are dropped)")
    g.add_argument("--max-retries", type=int, help="retries before the DLQ (default 16)")
    g.set_defaults(fn=c.groups_settings)
    g = groups.add_parser("consumers", help="live consumers and their subscriptions")
    g.add_argument("group")
    g.set_defaults(fn=c.groups_consumers)

    dlq = sub.add_parser("dlq", help="dead letters of a group").add_subparsers(
        dest="action", metavar="ACTION", parser_class=Parser, required=True)
    def filters(d: argparse.ArgumentParser) -> None:
        d.add_argument("--topic", help="only those first sent to this topic")
        d.add_argument("--key", help="only those with this key")
        d.add_argument("--reason", help="only those whose failure reason contains this text")

    d = dlq.add_parser("list", help="dead letters, oldest first")
    d.add_argument("group")
    d.add_argument("--limit", type=int, default=100)
    filters(d)
    d.set_defaults(fn=c.dlq_list)
    d = dlq.add_parser("show", help="one dead letter with its attempts")
    d.add_argument("group")
    d.add_argument("msg_id")
    d.add_argument("--full", action="store_true", help="print the whole body")
    d.set_defaults(fn=c.dlq_show)
    d = dlq.add_parser("resend", help="send dead letters back (one, a filter, or all)")
    d.add_argument("group")
    d.add_argument("msg_ids", nargs="*", metavar="MSGID")
    d.add_argument("--all", action="store_true", help="every dead letter")
    filters(d)
    d.add_argument("--to-origin", action="store_true",
                   help="back to the original topic, where every subscribed group receives "
                        "it (default: the group's retry topic, this group alone)")
    d.add_argument("--to-retry", action="store_true",
                   help="into the group's retry topic (the default; kept for old scripts)")
    d.add_argument("--delay-level", type=int, default=0,
                   help="delay level in the retry topic (not with --to-origin)")
    d.add_argument("--rate", type=float, metavar="MSGS_PER_S", help="resend at most this fast")
    d.set_defaults(fn=c.dlq_resend)
    d = dlq.add_parser("purge", help="delete dead letters for good (msgIds, a filter, or --all)")
    d.add_argument("group")
    d.add_argument("msg_ids", nargs="*", metavar="MSGID")
    d.add_argument("--all", action="store_true", help="every dead letter of the group")
    filters(d)
    d.add_argument("--yes", action="store_true", help="confirm")
    d.set_defaults(fn=c.dlq_purge)
    d = dlq.add_parser("audit", help="resends and purges done so far, newest first")
    d.add_argument("group")
    d.add_argument("--limit", type=int, default=100)
    d.set_defaults(fn=c.dlq_audit)

    lv = sub.add_parser("levels", help="the delay table with backlog and lag per level")
    lv.set_defaults(fn=c.levels)

    add_cluster_commands(sub, Parser)
    k8s_commands.add_parser(sub, Parser)
    add_analytics_commands(sub, Parser)
    add_auth_commands(sub, Parser)
    return p


def hint(exc: ClepsydraError, ctx: c.Context) -> str:
    """What to do about an error."""
    if isinstance(exc, AnalyticsUnavailable):
        return ("is the analytics service running? `make run` starts it; or point "
                f"--analytics-url (CLEPSYDRA_ANALYTICS_URL) at it (now {ctx.analytics_url})")
    if exc.code == "CLUSTER_ERROR":
        return ("check the kubeconfig context and namespace (`clepsydra k8s --context C -n NS "
                "...`), that the manifests are applied (`kubectl apply -k k8s/overlays/dev`) "
                "and that your account may do this (`kubectl auth can-i ...`)")
    if isinstance(exc, Unavailable):
        return ("is the service running? Start the local stack with `make run`, or point "
                "--store-url / --retry-url (CLEPSYDRA_STORE_URL / CLEPSYDRA_RETRY_URL) at it "
                f"(store {ctx.store_url}, retry {ctx.retry_url})")
    if isinstance(exc, TopicNotFound):
        return ("see the topics with `clepsydra topics list`; create one with "
                "`clepsydra topics create NAME --queues 8`")
    if isinstance(exc, GroupNotFound):
        return "create the group first: `clepsydra groups settings GROUP --max-retries 16`"
    if isinstance(exc, AlreadyDelivered):
        return ("it was already handed to its topic, so its consumers have it or will: a "
                "delivered message cannot be taken back (`clepsydra message show MSGID` "
                "lists its copies)")
    if isinstance(exc, MessageNotFound):
        return ("check the msgId; `clepsydra message show --key KEY --topic TOPIC` finds a "
                "message by key")
    if isinstance(exc, Unauthorized):
        return ("give a token with --token or CLEPSYDRA_TOKEN (access control is on; "
                "`clepsydra auth create` makes one)")
    if isinstance(exc, Forbidden) and exc.code == "FORBIDDEN" and "role" in exc.message:
        return "ask an admin for a token whose role covers this (`clepsydra auth create`)"
    if isinstance(exc, NoPermission):
        if "drained" in exc.message:
            return ("that store shard is drained (`clepsydra cluster`); send through the store "
                    "address, which routes around it, or `clepsydra cluster resume ID`")
        return "the store is read-only now (CLEPSYDRA_STORE_WRITABLE=false): try again later"
    if isinstance(exc, ValidationError | ConfigError):
        return "fix the value named above; `clepsydra COMMAND --help` lists the options"
    return "try again; if it keeps failing, look at the service's log"


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        err.write(f"{exc}\nrun `clepsydra --help` (or `clepsydra COMMAND --help`) for usage\n")
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        settings = ClientSettings.from_env()
    except ConfigError as exc:
        err.write(f"error: {exc.message}\n")
        return 1
    ctx = c.Context(store_url=args.store_url or settings.store_url,
                    retry_url=args.retry_url or settings.retry_url, json=args.json,
                    timeout_s=args.timeout or settings.timeout_s, out=out, err=err,
                    progress=not args.no_progress, broker_name=settings.broker_name,
                    analytics_url=args.analytics_url or settings.analytics_url,
                    token=args.token or None)
    try:
        result = args.fn(args, ctx)
    except UsageError as exc:
        err.write(f"{exc}\n")
        return 2
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
    except ClepsydraError as exc:
        if args.debug:
            raise
        err.write(f"error: {exc.message}" + (f" [{exc.code}]" if exc.code else "") + "\n")
        err.write(f"  what to do: {hint(exc, ctx)}\n")
        return 1
    except OSError as exc:
        if args.debug:
            raise
        err.write(f"error: {exc}\n  what to do: check the path and its permissions\n")
        return 1
    except Exception as exc:
        if args.debug:
            raise
        err.write(f"error: unexpected {type(exc).__name__}: {exc}\n"
                  "  what to do: run again with --debug and report the traceback\n")
        return 1
    finally:
        ctx.close()
    if result is not None:
        out.write((json.dumps(result.data, indent=2, default=str) if args.json
                   else result.text) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
