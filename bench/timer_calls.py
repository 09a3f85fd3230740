"""The timers' steady state: what each scheduler hand-over call costs the store
(DEC-timer-handover-gap).

    .venv/bin/python -m bench.timer_calls [--rate 1700] [--span-s 10] [--rounds 1]
                                          [--gap-ms 0,3]

The whole local stack (``python -m tools.stack``). ``rate x span`` timers of 200 bytes are
sent in batches beforehand, their delivery times uniform over ``span`` seconds starting 6 s
later; then, while only the scheduler calls ``POST /v1/schedule/timers/handover`` (one call
returns as soon as a timer is due), the store worker's CPU (``/proc``), the calls and the
timers handed over (the store's metrics) are measured over ``span - 2.5`` seconds: CPU per
call and per timer, calls a second, the scheduler's CPU, and the store's lateness figures
(``GET /v1/schedule/timers``). Compare two trees back to back by running this from each with
``PYTHONPATH`` pointing at it, rounds alternating; ``--gap-ms 0,3`` alternates the store's
``CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS`` in each round instead.
"""

from __future__ import annotations

import argparse
import os
import random
import time
import urllib.request
from pathlib import Path

import requests

from bench.scratch import scratch_dir
from clepsydra_client import AdminClient
from clepsydra_core.wire.timers import TimerBacklog
from tests.fixtures.stack import (
    RunningStack,
    child_pid,
    descendants,
    launch_stack,
    stop_stack,
    store_worker_pid,
)

TOPIC = "TimerCalls"
_HZ = os.sysconf("SC_CLK_TCK")
_CALLS = 'clepsydra_store_requests_total{operation="timer_handover"'
_TIMERS = 'clepsydra_store_schedule_delivered_total{level="timer"'


def _cpu_s(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _HZ


def _metric(stack: RunningStack, prefix: str) -> float:
    with urllib.request.urlopen(stack.store_url + "/metrics") as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))


def one_round(rate: int, span_s: int, gap_ms: str | None = None) -> str:
    work = scratch_dir("clepsydra-bench-timer-calls")
    gap = {} if gap_ms is None else {"CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS": gap_ms}
    stack = launch_stack(work / "home", "--quiet", output_path=None,
                         CLEPSYDRA_OTEL_EXPORTER="none", **gap)
    try:
        store = store_worker_pid(stack)
        scheduler = child_pid(stack, "clepsydra_scheduler")
        AdminClient(stack.store_url, stack.retry_url).create_topic(TOPIC, 4)
        session = requests.Session()
        start = time.time_ns() // 1_000_000 + 6_000
        rnd = random.Random(14)
        ats = [start + rnd.randrange(span_s * 1000) for _ in range(rate * span_s)]
        for i in range(0, len(ats), 1000):
            session.post(f"{stack.store_url}/v1/topics/{TOPIC}/messages/batch", json={
                "messages": [{"body": "x" * 200, "deliverAt": at} for at in ats[i:i + 1000]]},
                timeout=30).raise_for_status()
        while time.time_ns() // 1_000_000 < start + 1000:
            time.sleep(0.05)
        sched = [scheduler, *descendants(scheduler)]
        cpu0, sched0 = _cpu_s(store), sum(_cpu_s(p) for p in sched)
        calls0, timers0 = _metric(stack, _CALLS), _metric(stack, _TIMERS)
        t0 = time.perf_counter()
        time.sleep(span_s - 2.5)
        seconds = time.perf_counter() - t0
        cpu, sched_cpu = _cpu_s(store) - cpu0, sum(_cpu_s(p) for p in sched) - sched0
        calls, timers = _metric(stack, _CALLS) - calls0, _metric(stack, _TIMERS) - timers0
        time.sleep(3)
        backlog = TimerBacklog.from_json(
            session.get(stack.store_url + "/v1/schedule/timers", timeout=30).json())
        late = backlog.lateness
        return (("" if gap_ms is None else f"gap {gap_ms:>2} ms  ") +
                f"calls {calls / seconds:5.0f}/s ({timers / max(calls, 1):.2f} timers a call)  "
                f"store CPU {100 * cpu / seconds:4.1f} % of a core, "
                f"{1e6 * cpu / max(calls, 1):4.0f} us a call, "
                f"{1e6 * cpu / max(timers, 1):4.0f} us a timer  "
                f"scheduler CPU {100 * sched_cpu / seconds:4.1f} %  "
                f"lateness p50/p99/max {late.p50 if late else '-'}/{late.p99 if late else '-'}/"
                f"{late.max if late else '-'} ms  pending {backlog.pending}")
    finally:
        stop_stack(stack)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1700, help="timers falling due a second")
    parser.add_argument("--span-s", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--gap-ms", help="comma-separated hand-over gaps to alternate")
    args = parser.parse_args()
    gaps = args.gap_ms.split(",") if args.gap_ms else [None]
    print(f"timer_calls: {args.rate} timers/s falling due for {args.span_s} s, nothing else "
          f"running; load average {os.getloadavg()[0]:.2f}")
    for _ in range(args.rounds):
        for gap in gaps:
            print(one_round(args.rate, args.span_s, gap), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
