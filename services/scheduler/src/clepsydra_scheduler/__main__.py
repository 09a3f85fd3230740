"""``python -m clepsydra_scheduler worker|beat|status|autoscale``.

- ``worker``: a Celery worker with a thread pool consuming every level queue (concurrency >
  number of levels, so each level's run and the keep-alives all get a thread). Extra arguments
  go to Celery (``worker -n name@%h``). ``worker --beat``: beat runs inside it, on a thread
  (clepsydra_core.runtime.celery_beat; one process, what the local stack runs: there must be only
  one beat, so never with several workers); it then also serves beat's health endpoint.
- ``beat``: Celery beat, one keep-alive per level; schedule file and pid file under
  ``$CLEPSYDRA_HOME/scheduler/``.
- Both serve their health endpoint (``health.py``) on ``CLEPSYDRA_SCHEDULER_PORT`` (worker,
  also ``/metrics``) / ``CLEPSYDRA_SCHEDULER_BEAT_PORT`` (beat); a port in use stops start-up
  with exit status 2.
- ``status``: one table row per level (queue range, handedOver, progress, backlog, lag,
  delivered, lateness p50/p99/max, lease); ``--prometheus`` prints the Prometheus text instead.
- ``autoscale``: sets the worker Deployment's replicas from the levels' backlog and lag
  (autoscaler.py; settings in autoscale_settings.py); in a pod, with its ServiceAccount.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import TYPE_CHECKING

from clepsydra_core.errors import ConfigError
from clepsydra_core.runtime import logging as clepsydra_logging
from clepsydra_core.runtime import telemetry
from clepsydra_scheduler.settings import SchedulerSettings

if TYPE_CHECKING:
    from clepsydra_core.runtime.celery_beat import EmbeddedBeat


def _serve_health(settings: SchedulerSettings, role: str,
                  beat: EmbeddedBeat | None = None,
                  ready: threading.Event | None = None) -> bool:
    """Start the role's health endpoint (health.py); False (after saying why) when its port
    cannot be bound."""
    from clepsydra_scheduler.health import serve_health

    port = settings.port if role == "worker" else settings.beat_port
    if port is None:
        return True
    try:
        serve_health(settings, role, port, beat=beat, ready=ready)
    except OSError as exc:
        name = "CLEPSYDRA_SCHEDULER_PORT" if role == "worker" else "CLEPSYDRA_SCHEDULER_BEAT_PORT"
        print(f"clepsydra scheduler: cannot serve {role} health on "
              f"{settings.bind}:{port} ({exc.strerror}): stop what listens there or set "
              f"{name} (0: no health endpoint)", file=sys.stderr)
        return False
    return True


def _worker(settings: SchedulerSettings, extra: list[str], *, beat: bool = False) -> int:
    from clepsydra_core.runtime.celery_beat import embed_beat
    from clepsydra_core.runtime.celery_worker import run_worker
    from clepsydra_scheduler.celery_app import create_celery, level_queues

    ready = threading.Event()  # set by the worker once it consumes its queues
    if not _serve_health(settings, "worker", ready=ready):
        return 2
    app = create_celery(settings, ready)
    if beat:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        if not _serve_health(settings, "beat", embed_beat(app, settings.beat_schedule_path)):
            return 2
    hostname = f"clepsydra-scheduler-{os.getpid()}@%h"
    app.conf.worker_redirect_stdouts = False
    clepsydra_logging.quiet_celery_root_warning()  # checked before Celery sets up logging
    if extra:  # options for Celery's command line
        app.worker_main(["--quiet", "worker", "-P", "threads", "-c", str(settings.concurrency),
                         "-Q", ",".join(level_queues(settings)), "-n", hostname,
                         "--without-gossip", "--without-mingle", "--without-heartbeat",
                         "-l", settings.common.log_level, *extra])
        return 0
    # without Celery's command line: 9.6 MiB less (clepsydra_core.runtime.celery_worker,
    # DEC-memory-at-rest)
    run_worker(app, pool="threads", concurrency=settings.concurrency,
               queues=level_queues(settings), loglevel=settings.common.log_level,
               hostname=hostname, without_gossip=True, without_mingle=True,
               without_heartbeat=True)
    return 0


def _beat(settings: SchedulerSettings, extra: list[str]) -> int:
    from clepsydra_scheduler.celery_app import create_celery

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    if not _serve_health(settings, "beat"):
        return 2
    app = create_celery(settings)
    app.start(["--quiet", "beat", "-s", str(settings.beat_schedule_path),
               "--pidfile", str(settings.beat_pid_path), "-l", settings.common.log_level, *extra])
    return 0


def _status(settings: SchedulerSettings, prometheus: bool) -> int:
    from clepsydra_scheduler.delivery import SystemClock
    from clepsydra_scheduler.handover_client import HttpHandoverApi
    from clepsydra_scheduler.level_state import RedisLevelState
    from clepsydra_scheduler.metrics import gather, prometheus_text, status_table
    from clepsydra_scheduler.ports import LevelStateUnavailable

    state = RedisLevelState.from_url(settings.common.effective_redis_url)
    store = HttpHandoverApi(settings.common.store_url, timeout_s=5.0)
    try:
        rows = gather(settings.levels, state, store, SystemClock().now_ms())
    except LevelStateUnavailable as exc:
        print(f"clepsydra scheduler status: {exc.message}", file=sys.stderr)
        return 1
    finally:
        store.close()
    if prometheus:
        sys.stdout.write(prometheus_text(rows))
    else:
        store_up = any(row.store is not None for row in rows)
        print(status_table(rows, store_up=store_up))
    return 0


def _autoscale() -> int:
    from clepsydra_scheduler.autoscale_settings import AutoscaleSettings

    try:
        settings = AutoscaleSettings.from_env()
    except ConfigError as exc:
        print(f"clepsydra scheduler autoscale: {exc.message}", file=sys.stderr)
        return 2
    clepsydra_logging.configure_from(settings.common, telemetry.SCHEDULER_SERVICE)
    from clepsydra_scheduler.autoscaler import run_service

    return run_service(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clepsydra_scheduler",
                                     description="Clepsydra scheduler (SPEC D1-D10)")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="Celery worker for every level queue (thread pool)")
    worker.add_argument("--beat", action="store_true",
                        help="run beat in this worker, on a thread (only one beat may run)")
    sub.add_parser("beat", help="Celery beat: one keep-alive per delay level")
    status = sub.add_parser("status", help="per-level table (or --prometheus text)")
    status.add_argument("--prometheus", action="store_true",
                        help="print the metrics in Prometheus text format")
    sub.add_parser("autoscale", help="scale the worker Deployment on the levels' backlog and lag")
    args, extra = parser.parse_known_args(argv)
    if args.command == "autoscale":
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return _autoscale()
    try:
        settings = SchedulerSettings.from_env()
    except ConfigError as exc:
        print(f"clepsydra scheduler: {exc.message}", file=sys.stderr)
        return 2
    if args.command == "status":
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        clepsydra_logging.configure("WARNING")
        return _status(settings, args.prometheus)
    if args.command == "worker":
        return _worker(settings, extra, beat=args.beat)
    return _beat(settings, extra)


if __name__ == "__main__":
    sys.exit(main())
