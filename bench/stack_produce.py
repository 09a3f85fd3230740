"""Produce on the whole local stack, beside redis-py ``ZADD`` against the stack's own Redis in
the same run (only ratios measured in one run compare: docs/performance.md).

    .venv/bin/python -m bench.stack_produce [--seconds 5] [--rounds 2] [--body 256]
                     [--only zadd,raw1,sdk1,procs1,procs4,batch] [--without-analytics]
                     [--set VAR=VALUE ...] [--profile DIR]

Starts ``python -m tools.stack`` (what ``make run`` runs: Redis, store, retry, the scheduler's
worker with beat, the analytics with its exporter; ``--without-analytics`` is ``make
run-core``) on free ports under a temporary CLEPSYDRA_HOME, creates a topic of 4 queues and, in
each round, runs one after the other for ``--seconds`` each:

  zadd    redis-py ``ZADD`` of one member at a time against the stack's Redis (the baseline:
          what a Python user's sorted-set delay queue costs per message)
  raw1    single-message produce from one keep-alive HTTP/1.1 client (a raw socket: the
          cheapest Python client, so the figure is the stack's)
  sdk1    the SDK's ``Producer.send``, one message a call
  sdk1nospin  the same with the client's spin for a quick answer off
          (``CLEPSYDRA_CLIENT_SPIN_US=0``; DEC-client-spin-spare-core): on and off in one run
  procs1  ``raw1`` from one client process of its own; procs4: from 4 at once (target: 4
          processes >= 1.5x one)
  batch   batches of 100 from one raw keep-alive client (target: >= 10x the single ``ZADD``
          rate); then the exporter's lag after the burst (its ``/metrics``), how long it takes
          to drain (target: within a minute), and, at the end, the export checked exactly
          once: every offset of the topic in exactly one Parquet file

Each scenario prints messages a second and the cores' time by process in its window
(``bench.stack_cpu``: the store's CPU a message, the client's, and the rest of the machine:
what else ran), and the store's requests by operation over the scenario (what else it answered
beside the producers: the exporter's reads, the scheduler's pulls). The table at the end gives
the ratios per round. ``--set VAR=VALUE`` is given
to the stack and to this process (the SDK, the client processes): e.g. both spins off with
``--set CLEPSYDRA_STORE_POLLER_SPIN_US=0 --set CLEPSYDRA_CLIENT_SPIN_US=0``. ``--profile DIR``
records the stack's Python processes with py-spy during ``raw1``, ``procs1``, ``procs4`` and
``batch``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.raw_client import RawConnection, timed_loop
from bench.scratch import scratch_dir
from bench.stack_cpu import CpuWindow, Profiles, stack_processes, store_requests
from tests.fixtures.stack import RunningStack, launch_stack, stop_stack

TOPIC = "speed"
QUEUES = 4
BATCH = 100
SCENARIOS = ("zadd", "raw1", "sdk1", "sdk1nospin", "procs1", "procs4", "batch")
ZSET_KEY = "bench:stack-produce"
EXPORT_DRAIN_TIMEOUT_S = 300.0
EXPORTER_METRICS = ("clepsydra_analytics_exporter_lag_messages",
                    "clepsydra_analytics_exporter_pulled_rows",
                    "clepsydra_analytics_exporter_rows")


def message_json(body_bytes: int) -> bytes:
    return json.dumps({"body": "x" * body_bytes, "tags": "bench"}).encode()


def batch_json(body_bytes: int) -> bytes:
    return json.dumps({"messages": [{"body": "x" * body_bytes, "tags": "bench"}
                                    for _ in range(BATCH)]}).encode()


@dataclass
class Result:
    name: str
    messages: int
    seconds: float
    cpu: CpuWindow | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


# ---- the scenarios -------------------------------------------------------------------------

def run_zadd(redis_url: str, seconds: float) -> tuple[int, float]:
    r = redis.Redis.from_url(redis_url)
    r.delete(ZSET_KEY)
    counter = [0]

    def step() -> int:
        counter[0] += 1
        r.zadd(ZSET_KEY, {f"m{counter[0]}": time.time() * 1000 + 60_000})
        return 1

    try:
        return timed_loop(seconds, step)
    finally:
        r.delete(ZSET_KEY)
        r.close()


def run_raw(store_url: str, seconds: float, body_bytes: int, *,
            batch: bool = False) -> tuple[int, float]:
    path = f"/v1/topics/{TOPIC}/messages" + ("/batch" if batch else "")
    conn = RawConnection(store_url, path, batch_json(body_bytes) if batch
                         else message_json(body_bytes))
    try:
        conn.send()  # connect
        size = BATCH if batch else 1

        def step() -> int:
            conn.send()
            return size

        n, elapsed = timed_loop(seconds, step)
        return n + size, elapsed
    finally:
        conn.close()


def run_sdk(store_url: str, seconds: float, body_bytes: int,
            spin_us: int | None = None) -> tuple[int, float]:
    from clepsydra_client import Producer
    from clepsydra_core.runtime.http import HttpClient

    body = "x" * body_bytes
    http = None if spin_us is None else HttpClient(store_url, service="store", spin_us=spin_us)
    with Producer(store_url, http=http) as producer:
        producer.send(TOPIC, body, tags="bench")  # connect

        def step() -> int:
            producer.send(TOPIC, body, tags="bench")
            return 1

        return timed_loop(seconds, step)


def run_processes(store_url: str, n: int, seconds: float, body_bytes: int,
                  window: CpuWindow) -> tuple[int, float]:
    """``raw1`` from ``n`` client processes (``bench.raw_client``) started together once every
    one is connected (``window`` measures them as ``clients``); (messages, seconds of the
    slowest)."""
    body_file = scratch_dir("clepsydra-stack-produce-body-") / "message.json"
    body_file.write_bytes(message_json(body_bytes))
    procs = [subprocess.Popen([sys.executable, "-m", "bench.raw_client", store_url,
                               f"/v1/topics/{TOPIC}/messages", str(body_file), str(seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"a client process did not connect (exit {proc.wait()})")
    start_at = time.time() + 0.2  # every process is waiting on its pipe: just the hand-over
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{start_at}\n")
        proc.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))
    window.start()
    total, longest, user, system = 0, 0.0, 0.0, 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 60)
        count, elapsed, u, s = out.split()
        total += int(count)
        longest = max(longest, float(elapsed))
        user, system = user + float(u), system + float(s)
    window.stop()
    # the clients have exited: their own account of the CPU they spent sending
    window.used[f"{n} client process{'es' if n > 1 else ''}"] = (user, system)
    return total, longest


# ---- the exporter after a burst ------------------------------------------------------------

def exporter_metrics(stack: RunningStack) -> dict[str, float] | None:
    """The exporter's lag and row counters from its /metrics (None: no exporter)."""
    port = stack.env.get("CLEPSYDRA_ANALYTICS_EXPORTER_PORT")
    if not port:
        return None
    try:
        raw = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    found: dict[str, float] = {}
    for line in raw.decode().splitlines():
        name, _, value = line.partition(" ")
        base = name.removesuffix("_total")
        if base in EXPORTER_METRICS:
            found[base] = float(value)
    return found


def topic_messages(store_url: str) -> int:
    from clepsydra_client import AdminClient

    return sum(q.max_offset for q in AdminClient(store_url).topic(TOPIC).queues)


def exporter_drain(stack: RunningStack) -> list[str]:
    """After a burst: how far the exporter is behind (the topic's messages - the rows it has
    pulled: the bench writes only this topic) and how long until it has pulled them all."""
    ended = time.monotonic()
    first = exporter_metrics(stack)
    if first is None:
        return ["exporter: none (no analytics in this stack)"]
    total = topic_messages(stack.store_url)
    lag0 = total - first.get("clepsydra_analytics_exporter_pulled_rows", 0)
    deadline = ended + EXPORT_DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        m = exporter_metrics(stack) or {}
        if m.get("clepsydra_analytics_exporter_pulled_rows", 0) >= total:
            return [f"exporter behind by {lag0:,.0f} of {total:,} messages at the end of the "
                    f"burst; all pulled {time.monotonic() - ended:.1f} s after it "
                    f"(target: within 60 s)"]
        time.sleep(0.25)
    return [f"exporter behind by {lag0:,.0f} at the end of the burst; NOT caught up after "
            f"{EXPORT_DRAIN_TIMEOUT_S:.0f} s"]


def check_export_once(stack: RunningStack, timeout_s: float = 120.0) -> str:
    """Ask the exporter to write what it buffered (the flush-request file a jobs run
    touches), then read every Parquet file of the topic: each queue's offsets in exactly one
    file, every offset from 0 to the queue's end."""
    from clepsydra_analytics.export_files import ExportFiles
    from clepsydra_client import AdminClient
    from clepsydra_core import naming

    ends = {q.queue_id: q.max_offset for q in
            AdminClient(stack.store_url).topic(TOPIC).queues}
    flush = stack.home / naming.ANALYTICS_DIR / naming.EXPORT_FLUSH_REQUEST
    flush.parent.mkdir(parents=True, exist_ok=True)
    flush.touch()
    files = ExportFiles(str(stack.home / naming.EXPORT_DIR))
    deadline = time.monotonic() + timeout_s
    while True:
        done = files.exported_ends()
        if all(done.get((TOPIC, q), 0) >= end for q, end in ends.items()):
            break
        if time.monotonic() > deadline:
            return f"export NOT complete after {timeout_s:.0f} s: {done} of {ends}"
        time.sleep(0.5)
    seen: dict[int, list[int]] = {q: [] for q in ends}
    for r in files.ranges():
        if r.topic == TOPIC:
            seen[r.queue_id] += files.read_table(r).column("queue_offset").to_pylist()
    for q, end in ends.items():
        offsets = sorted(seen[q])
        if offsets != list(range(end)):
            dup = len(offsets) - len(set(offsets))
            return (f"export NOT exactly once: queue {q} has {len(offsets):,} rows for "
                    f"offsets 0..{end - 1} ({dup:,} twice)")
    return (f"export exactly once: {sum(ends.values()):,} messages of '{TOPIC}', each offset "
            f"in one file")


# ---- main ----------------------------------------------------------------------------------

def run_round(stack: RunningStack, args: argparse.Namespace, only: list[str],
              profile_dir: Path | None, round_no: int) -> list[Result]:
    redis_url = f"redis://127.0.0.1:{stack.env['CLEPSYDRA_REDIS_PORT']}/0"
    results: list[Result] = []
    for name in only:
        window = CpuWindow(stack, {"bench (this process)": os.getpid()})
        profiles = None
        if profile_dir is not None and name in ("raw1", "procs1", "procs4", "batch"):
            pids = {n: pid for pid, n in stack_processes(stack).items()
                    if n not in ("redis", "supervisor")}
            profiles = Profiles(pids, args.seconds, profile_dir / f"r{round_no}-{name}").start()
        calls0 = store_requests(stack.store_url)
        if name == "procs1" or name == "procs4":
            n, seconds = run_processes(stack.store_url, int(name[-1]), args.seconds,
                                       args.body, window)
        else:
            window.start()
            if name == "zadd":
                n, seconds = run_zadd(redis_url, args.seconds)
            elif name == "raw1":
                n, seconds = run_raw(stack.store_url, args.seconds, args.body)
            elif name == "sdk1":
                n, seconds = run_sdk(stack.store_url, args.seconds, args.body)
            elif name == "sdk1nospin":
                n, seconds = run_sdk(stack.store_url, args.seconds, args.body, 0)
            elif name == "batch":
                n, seconds = run_raw(stack.store_url, args.seconds, args.body, batch=True)
            else:
                raise SystemExit(f"unknown scenario {name!r}")
            window.stop()
        result = Result(name, n, seconds, window)
        calls = store_requests(stack.store_url) - calls0
        result.notes.append("store requests: " + ", ".join(
            f"{op} {count:,}" for op, count in calls.most_common()))
        if name == "batch":
            result.notes += exporter_drain(stack)
        if profiles is not None:
            for process, profile in profiles.wait().items():
                if profile.busy:
                    top = "; ".join(f"{pct:.0f}% {fn}" for fn, pct in profile.top(6))
                    result.notes.append(f"py-spy {process}: {top}")
        print(f"\n[round {round_no}] {name}: {result.rate:,.0f} msgs/s "
              f"({n:,} in {seconds:.1f} s)", flush=True)
        print(window.table(("msg", n)), flush=True)
        for note in result.notes:
            print(f"  {note}", flush=True)
        results.append(result)
    return results


def ratios(results: list[Result]) -> str:
    by = {r.name: r.rate for r in results}
    parts = []
    zadd = by.get("zadd")
    for name, label in (("raw1", "raw1/zadd"), ("sdk1", "sdk1/zadd"),
                        ("sdk1nospin", "sdk1nospin/zadd"), ("batch", "batch/zadd")):
        if zadd and name in by:
            parts.append(f"{label} {by[name] / zadd:.2f}")
    if by.get("sdk1") and "sdk1nospin" in by:
        parts.append(f"sdk1/sdk1nospin {by['sdk1'] / by['sdk1nospin']:.2f}")
    if by.get("procs1") and "procs4" in by:
        parts.append(f"procs4/procs1 {by['procs4'] / by['procs1']:.2f}")
    return ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--body", type=int, default=256, help="body bytes (default 256)")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--without-analytics", action="store_true",
                        help="make run-core's stack (tools.stack's flag)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    settings = {}
    for item in args.set:
        var, _, value = item.partition("=")
        settings[var] = os.environ[var] = value
    only = args.only.split(",")
    home = scratch_dir("clepsydra-stack-produce-") / "home"
    flags = ("--without-analytics",) if args.without_analytics else ()
    stack = launch_stack(home, "--quiet", *flags, CLEPSYDRA_OTEL_EXPORTER="none", **settings)
    rows: list[list[Result]] = []
    try:
        from clepsydra_client import AdminClient

        AdminClient(stack.store_url).create_topic(TOPIC, QUEUES)
        print(f"stack_produce: {'make run-core' if flags else 'make run'} stack under {home}, "
              f"{args.body}-byte bodies, {args.seconds:g} s a scenario"
              + (f", settings {' '.join(args.set)}" if args.set else ""), flush=True)
        for round_no in range(1, args.rounds + 1):
            rows.append(run_round(stack, args, only, args.profile, round_no))
        export = check_export_once(stack) if not flags and "batch" in only else None
    finally:
        stop_stack(stack)
    print(f"\n{'round':<6}" + "".join(f"{name:>11}" for name in only) + "   ratios")
    for round_no, results in enumerate(rows, 1):
        print(f"{round_no:<6}" + "".join(f"{r.rate:>11,.0f}" for r in results)
              + f"   {ratios(results)}")
    print("msgs/s; store CPU a message (us):")
    for round_no, results in enumerate(rows, 1):
        print(f"{round_no:<6}" + "".join(
            f"{1e6 * r.cpu.seconds('store') / max(r.messages, 1):>11,.1f}" if r.cpu else
            f"{'-':>11}" for r in results))
    if export:
        print(export)
    return 0


if __name__ == "__main__":
    sys.exit(main())
