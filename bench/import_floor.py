"""What each process of the local stack costs only to import its code (DEC-memory-at-rest: "the
whole local stack's memory: <= 200 MB RSS at rest").

    .venv/bin/python -m bench.import_floor

For each Python process ``make run`` starts, a fresh interpreter imports the modules that
process loads at start (its app, its server or Celery worker, nothing started, no data) and
prints its RSS from ``/proc/self/statm``; then the sum, with the RSS of a redis-server at rest
(started here, as the stack starts it, and stopped). The sum is a floor for the stack's RSS
at rest: a process holds at least what it imported. A bare interpreter and the big libraries
alone are printed too, for scale.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.processes import RedisServer

FLOORS = {
    "store": "clepsydra_store.app, clepsydra_store.worker",
    "retry": "clepsydra_retry.app, clepsydra_web.server",
    "scheduler": "clepsydra_scheduler.celery_app, clepsydra_scheduler.tasks, celery.worker, "
                 "celery.apps.worker",
    "analytics": "clepsydra_analytics.app, clepsydra_analytics.server, "
                 "clepsydra_analytics.celery_app, clepsydra_analytics.exporter, celery.worker",
    "supervisor": "tools.stack",
}
"""The processes of ``make run`` (tools/parts.py's EVERYTHING and the supervisor) and what
each imports before it serves."""
SCALE = {"a bare interpreter": "", "flask": "flask", "redis-py": "redis",
         "celery": "celery, celery.worker", "gunicorn": "gunicorn.workers.gthread"}

MEASURE = ("{imports}\n"
           "import os\n"
           "print(int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE'))")


def rss_after_import(modules: str) -> float:
    """MiB resident in a fresh interpreter after ``import modules``."""
    code = MEASURE.format(imports=f"import {modules}" if modules else "")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[-1]) / 2**20


def redis_at_rest() -> float:
    """MiB resident in a redis-server with nothing stored, a second after it answered PING."""
    with tempfile.TemporaryDirectory(prefix="clepsydra-floor-") as tmp:
        redis = RedisServer(Path(tmp), appendonly=True).start()
        try:
            time.sleep(1.0)
            status = Path(f"/proc/{redis.pid}/status").read_text()
        finally:
            redis.stop()
    kib = next(int(line.split()[1]) for line in status.splitlines()
               if line.startswith("VmRSS:"))
    return kib / 1024


def main() -> int:
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print("libraries alone (MiB RSS after import, fresh interpreter):")
    for name, modules in SCALE.items():
        print(f"  {name:<20} {rss_after_import(modules):6.1f}")
    print("each process of make run, its imports only:")
    redis = redis_at_rest()
    total = redis
    for name, modules in FLOORS.items():
        mib = rss_after_import(modules)
        total += mib
        print(f"  {name:<20} {mib:6.1f}")
    print(f"  {'redis-server':<20} {redis:6.1f}  (at rest, nothing stored)")
    print(f"= floor of the stack  {total:6.1f} MiB ({total * 2**20 / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
