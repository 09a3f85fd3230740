"""``python -m clepsydra_analytics export | serve | jobs run | schedule``.

- ``export``: the exporter, until SIGTERM/SIGINT (it writes what it has buffered, then exits).
- ``serve``: the HTTP API under gunicorn on CLEPSYDRA_ANALYTICS_PORT. ``serve --schedule
  --export``: the schedule's worker and the exporter too, on threads of the API's process (one
  process: what the local stack runs, server.py).
- ``jobs run [--job NAME]... [--since 2h] [--format text|json] [--no-export]``: export what is
  not exported yet, run the jobs once in this process, write the report, exit (the Kubernetes
  CronJob and the local schedule run this).
- ``schedule``: the local schedule, one Celery worker with its beat embedded; each run is a
  ``jobs run`` subprocess, so the JVM's memory is returned after it.

Exit status 2 for bad settings or bad input (the message names the problem), 1 for a failure.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core.errors import ClepsydraError, ConfigError
from clepsydra_core.naming import ANALYTICS_SERVICE
from clepsydra_core.runtime import logging as clogging

PROG = "clepsydra analytics"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clepsydra_analytics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("export", help="run the exporter until stopped")
    serve = sub.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--schedule", action="store_true",
                       help="run the schedule's worker in the same process (the local stack)")
    serve.add_argument("--export", action="store_true",
                       help="run the exporter in the same process (the local stack)")
    sub.add_parser("schedule", help="run the local schedule (Celery worker with beat)")
    jobs = sub.add_parser("jobs", help="run the jobs once")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    run = jobs_sub.add_parser("run", help="export first, run the jobs, write the report")
    run.add_argument("--job", action="append", default=None,
                     help="a job to run (repeatable; default: all)")
    run.add_argument("--since", default=None, help="window, e.g. 2h (default "
                     "CLEPSYDRA_ANALYTICS_SINCE)")
    run.add_argument("--format", choices=("text", "json"), default="text")
    run.add_argument("--no-export", action="store_true",
                     help="do not export what is new before running")
    return parser


def _export(settings: AnalyticsSettings) -> int:
    from clepsydra_analytics.exporter import run_exporter

    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    run_exporter(settings, stop)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = AnalyticsSettings.from_env()
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure_from(settings.common, ANALYTICS_SERVICE)
    if args.command == "jobs":  # stdout carries the summary (or JSON): logs go to stderr
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sys.stderr)
    try:
        if args.command == "export":
            return _export(settings)
        if args.command == "serve":
            from clepsydra_analytics.server import serve

            return serve(settings, schedule=args.schedule, export=args.export)
        if args.command == "schedule":
            from clepsydra_analytics.celery_app import run_schedule

            return run_schedule(settings)
        from clepsydra_analytics.cli_jobs import jobs_run

        return jobs_run(settings, jobs=args.job, since=args.since, output=args.format,
                        export_first=not args.no_export)
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return 2
    except ClepsydraError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
