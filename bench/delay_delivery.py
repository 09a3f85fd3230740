"""Delayed delivery benchmark: Clepsydra's scheduler beside Celery's own ``countdown``.

    .venv/bin/python -m bench.delay_delivery [--quick] [--messages N] [--drain N]
                                             [--pending N] [--skip celery,pending,...]

Everything runs as real processes on free ports under a temporary CLEPSYDRA_HOME: one
redis-server, the store (``python -m clepsydra_store``, default level table ``1s 5s 10s 30s
...``), the scheduler's worker and beat (``python -m clepsydra_scheduler worker|beat``), and for
the comparison a Celery worker (one process, solo pool) of a trivial task defined here.

Phases (targets on a 2-core machine):
  lateness  N x 1 KiB messages, levels 1-4 round robin, HTTP batches of 100 from 2 threads:
            enqueue rate; lateness = storeTimestamp of the delivered copy - its DELIVER_TS,
            p50 <= 20 ms, p99 <= 50 ms; peak RSS of worker (<= 100 MB) and beat; beat's CPU.
  drain     N level-1 messages produced with the scheduler stopped, all due, then the worker
            started: drain rate (first to last hand-over) >= 50,000 msgs/s (later 100,000).
  engine    the drain's N messages handed over by the store engine alone, in this process:
            CPU per message (best and median of 3), the writer's cost without HTTP.
  celery    the lateness workload as Celery tasks with ``countdown`` (held in the worker's
            memory until due); the task records arrival - intended deliver time in Redis.
  pending   1,000,000 messages at level 18 (2 h): worker RSS and Redis used_memory sampled
            while they are stored - flat (Redis holds progress, not messages; <= 10 MB).

``--quick``: 10,000 / 10,000 / 100,000 messages, for a smoke run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests

from tools import parts
from tools.processes import HttpService, Process, RedisServer, free_port, wait_until

REPO = Path(__file__).resolve().parents[1]

BODY = "x" * 1024
BATCH = 100
TOPIC = "bench"
LEVEL_DELAYS_S = {1: 1, 2: 5, 3: 10, 4: 30}
LONG_LEVEL = 18  # 2h in the default table
CELERY_ARRIVALS = "bench:celery:arrivals"
ENGINE_CALL = 2_000
"""Entries per in-process hand-over call (the store's LOCK_CHUNK)."""


# ---- helpers ---------------------------------------------------------------------------------

def proc_status(pid: int, field_name: str) -> int:
    """A kB figure from /proc/<pid>/status (VmRSS, VmHWM), in bytes; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of a process and all its descendants (gunicorn and Celery workers fork)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
        todo.extend(children.get(p, ()))
    return total


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f} MB"


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(int(q * len(sorted_values)), len(sorted_values) - 1)
    return float(sorted_values[index])


def lateness_line(name: str, values: list[int]) -> str:
    values = sorted(values)
    if not values:
        return f"{name:<28} (nothing measured)"
    early = sum(1 for v in values if v < 0)
    return (f"{name:<28} p50 {percentile(values, 0.50):7.1f} ms   p99 "
            f"{percentile(values, 0.99):8.1f} ms   max {values[-1]:8d} ms   "
            f"mean {statistics.fmean(values):7.1f} ms   early {early}")


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


class Http:
    """Produce and pull over keep-alive sessions (one per thread)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "s"):
            self._local.s = requests.Session()
        return self._local.s  # type: ignore[no-any-return]

    def create_topic(self, name: str, queues: int) -> None:
        self.session.post(f"{self.base}/v1/topics", json={"name": name, "queues": queues},
                          timeout=30).raise_for_status()

    def produce(self, n: int, level_of: Callable[[int], int], threads: int = 2,
                topic: str = TOPIC) -> float:
        """Send n messages in batches of BATCH from ``threads`` threads; returns seconds."""
        payloads = []
        for start in range(0, n, BATCH):
            msgs = [{"body": BODY, "delayLevel": level_of(i)}
                    for i in range(start, min(start + BATCH, n))]
            payloads.append(json.dumps({"messages": msgs}).encode())
        url = f"{self.base}/v1/topics/{topic}/messages/batch"
        lock = threading.Lock()
        todo = iter(payloads)

        def send() -> None:
            while True:
                with lock:
                    body = next(todo, None)
                if body is None:
                    return
                resp = self.session.post(url, data=body, timeout=60,
                                         headers={"content-type": "application/json"})
                resp.raise_for_status()

        started = time.perf_counter()
        workers = [threading.Thread(target=send) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.perf_counter() - started

    def count(self, topic: str = TOPIC) -> int:
        resp = self.session.get(f"{self.base}/v1/topics/{topic}", timeout=30)
        resp.raise_for_status()
        return sum(q["maxOffset"] - q["minOffset"] for q in resp.json()["queues"])

    def lateness(self, topic: str = TOPIC) -> list[tuple[int, int, int, str]]:
        """(level, DELIVER_TS, storeTimestamp - DELIVER_TS, SCHEDULE_OFFSET) of every
        delivered message (SCHEDULE_OFFSET names the schedule entry it came from)."""
        info = self.session.get(f"{self.base}/v1/topics/{topic}", timeout=30).json()
        out: list[tuple[int, int, int, str]] = []
        for queue in info["queues"]:
            offset = queue["minOffset"]
            while offset < queue["maxOffset"]:
                page = self.session.get(
                    f"{self.base}/v1/topics/{topic}/queues/{queue['queueId']}/messages",
                    params={"offset": offset, "max": 1000}, timeout=60).json()
                for m in page["messages"]:
                    props = m["properties"]
                    deliver_ts = int(props["DELIVER_TS"])
                    origin = props["SCHEDULE_OFFSET"]
                    level = int(origin.split(":")[0])
                    out.append((level, deliver_ts, m["storeTimestamp"] - deliver_ts, origin))
                if not page["messages"]:
                    break
                offset = page["nextOffset"]
        return out

    def handed_over(self, level: int) -> tuple[int, int]:
        """(handedOver, maxOffset) of a level."""
        levels = self.session.get(f"{self.base}/v1/schedule/levels", timeout=30).json()["levels"]
        item = next(i for i in levels if i["level"] == level)
        return int(item["handedOver"]), int(item["maxOffset"])


class DeliveryStack:
    """redis-server + store (the one stack builder, tools/parts.py) under one temporary home,
    scheduler processes added on demand."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.parts = parts.Stack(home, env={"CLEPSYDRA_DELAY_LEVELS": "",
                                            "CLEPSYDRA_LOG_LEVEL": "WARNING"})
        self.parts.with_redis().with_store().start()
        assert self.parts.redis is not None
        self.redis: RedisServer = self.parts.redis
        self.store: HttpService = self.parts.store
        self.http = Http(self.store.url)
        self.r = redis.Redis.from_url(self.redis.url)
        self.procs: list[Process] = []
        self._n = 0

    def start(self, command: str) -> Process:
        """A scheduler worker or beat (no health servers: several run at once)."""
        self._n += 1
        part = parts.SCHEDULER_WORKER if command == "worker" else parts.SCHEDULER_BEAT
        env = {"CLEPSYDRA_SCHEDULER_PORT": "0", "CLEPSYDRA_SCHEDULER_BEAT_PORT": "0"}
        if command == "worker":
            env["CLEPSYDRA_LOG_LEVEL"] = "INFO"  # the ready line
        proc = self.parts.add(part, name=f"{command}-{self._n}", **env)
        self.procs.append(proc)
        return proc

    def redis_used_memory(self) -> int:
        return int(self.r.info("memory")["used_memory"])  # type: ignore[index]

    def close(self) -> None:
        self.parts.stop()


@contextmanager
def sampling(pids: dict[str, int], extra: dict[str, Callable[[], int]],
             interval_s: float = 0.5) -> Iterator[dict[str, list[int]]]:
    """Sample VmRSS of pids and the extra gauges every interval, in the background."""
    samples: dict[str, list[int]] = {name: [] for name in [*pids, *extra]}
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for name, pid in pids.items():
                samples[name].append(proc_status(pid, "VmRSS"))
            for name, fn in extra.items():
                samples[name].append(fn())
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


# ---- phases ----------------------------------------------------------------------------------

def phase_lateness(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== lateness: {n:,} x 1 KiB, levels 1-4 (1s 5s 10s 30s), scheduler running")
    beat = stack.start("beat")
    worker = stack.start("worker")
    time.sleep(2.0)
    beat_cpu0, beat_t0 = cpu_seconds(beat.pid), time.monotonic()
    seconds = stack.http.produce(n, lambda i: i % 4 + 1)
    produced_ms = time.time_ns() // 1_000_000
    report.add(f"enqueue rate                 {n / seconds:10,.0f} msgs/s  ({seconds:.1f} s)")
    wait_until(lambda: stack.http.count() >= n, 120 + max(LEVEL_DELAYS_S.values()),
               interval_s=0.5, what="every message delivered")
    beat_cpu = (cpu_seconds(beat.pid) - beat_cpu0) / (time.monotonic() - beat_t0)
    rows = stack.http.lateness()
    report.add(lateness_line("clepsydra lateness", [r[2] for r in rows]))
    for level in sorted(LEVEL_DELAYS_S):
        report.add(lateness_line(f"  level {level} ({LEVEL_DELAYS_S[level]}s)",
                                 [r[2] for r in rows if r[0] == level]))
    report.add(lateness_line("  due after produce ended", [r[2] for r in rows
                                                           if r[1] > produced_ms]))
    report.add(lateness_line("  due while producing", [r[2] for r in rows
                                                       if r[1] <= produced_ms]))
    once = len(rows) == n == len({r[3] for r in rows})
    report.add(f"delivered                    {len(rows):10,d}  (each entry once: {once})")
    report.add(f"worker peak RSS              {mb(proc_status(worker.pid, 'VmHWM')):>10}")
    report.add(f"beat peak RSS                {mb(proc_status(beat.pid, 'VmHWM')):>10}")
    report.add(f"beat CPU                     {beat_cpu * 100:9.2f} % of a core")
    report.add(f"redis used_memory            {mb(stack.redis_used_memory()):>10}")
    worker.stop()
    beat.stop()


def phase_drain(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== drain: {n:,} level-1 messages due at once, then the worker starts")
    topic = "drain"
    stack.http.create_topic(topic, 4)
    handed0, max0 = stack.http.handed_over(1)
    stack.http.produce(n, lambda i: 1, topic=topic)
    time.sleep(1.5)  # all due
    started = time.monotonic()
    worker = stack.start("worker")
    ready = time.monotonic()
    first: float | None = None
    cpu0 = (0.0, 0.0)
    target = max0 + n - 1
    while True:
        handed, _ = stack.http.handed_over(1)
        now = time.monotonic()
        if first is None and handed > handed0:
            first = now
            cpu0 = (tree_cpu_seconds(stack.store.pid), tree_cpu_seconds(worker.pid))
        if handed >= target:
            break
        if now - started > 600:
            raise TimeoutError("drain did not finish in 600 s")
        time.sleep(0.02)
    done = time.monotonic()
    cpu1 = (tree_cpu_seconds(stack.store.pid), tree_cpu_seconds(worker.pid))
    assert first is not None
    report.add(f"drain rate                   {n / max(done - first, 1e-3):10,.0f} msgs/s  "
               f"({done - first:.2f} s first to last hand-over; worker start "
               f"{ready - started:.1f} s)")
    store_us, worker_us = ((b - a) * 1e6 / n for a, b in zip(cpu0, cpu1, strict=True))
    report.add(f"CPU per message              store {store_us:5.1f} us, worker {worker_us:5.1f} us "
               f"(busy: store {(cpu1[0] - cpu0[0]) / (done - first) * 100:.0f} % of a core)")
    report.add(f"delivered into '{topic}'        {stack.http.count(topic):10,d}")
    report.add(f"worker peak RSS              {mb(proc_status(worker.pid, 'VmHWM')):>10}")
    worker.stop()


def phase_pending(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== pending: {n:,} x 1 KiB at level {LONG_LEVEL} (2h), scheduler running")
    beat = stack.start("beat")
    worker = stack.start("worker")
    time.sleep(2.0)
    topic = "pending"
    stack.http.create_topic(topic, 4)
    before = (proc_status(worker.pid, "VmRSS"), stack.redis_used_memory())
    with sampling({"worker": worker.pid, "beat": beat.pid},
                  {"redis": stack.redis_used_memory}) as samples:
        sent = 0
        step = max(n // 10, BATCH)
        while sent < n:
            chunk = min(step, n - sent)
            stack.http.produce(chunk, lambda i: LONG_LEVEL, topic=topic)
            sent += chunk
            report.add(f"  {sent:>9,d} pending: worker RSS {mb(proc_status(worker.pid, 'VmRSS'))}"
                       f", redis used_memory {mb(stack.redis_used_memory())}")
        time.sleep(5.0)
    idle_cpu0, idle_t0 = cpu_seconds(worker.pid), time.monotonic()
    time.sleep(10.0)
    idle_cpu = (cpu_seconds(worker.pid) - idle_cpu0) / (time.monotonic() - idle_t0)
    report.add(f"worker CPU with {n:,} pending, nothing due: {idle_cpu * 100:.2f} % of a core")
    for name in ("worker", "beat", "redis"):
        values = [v for v in samples[name] if v]
        report.add(f"{name:<8} min {mb(min(values)):>9}  max {mb(max(values)):>9}  "
                   f"(spread {mb(max(values) - min(values))})")
    report.add(f"before: worker RSS {mb(before[0])}, redis {mb(before[1])}; "
               f"handedOver/max level {LONG_LEVEL}: {stack.http.handed_over(LONG_LEVEL)}")
    worker.stop()
    beat.stop()


def engine_handover_cpu(kind: str, n: int, rounds: int = 3) -> tuple[float, float]:
    """The store engine alone, in this process: ``n`` 1 KiB level-1 messages
    (``kind`` "level") or timers due at once ("timer") put 100 at a time, then handed over
    the scheduler's way; (best, median) CPU µs (user + system) per message handed over, of
    ``rounds`` fresh stores. What the store's one writer process spends per message, without
    HTTP, the scheduler and the machine's other processes."""
    from clepsydra_core.levels import DelayLevels
    from clepsydra_store.engine.config import EngineConfig
    from clepsydra_store.engine.message_store import MessageStore
    from clepsydra_store.engine.types import PutRequest

    body = BODY.encode()
    figures: list[float] = []
    for _ in range(rounds):
        home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-engine-"))
        store = MessageStore(EngineConfig(data_dir=home, delay_levels=DelayLevels.default()))
        try:
            store.create_topic(TOPIC, 4)
            due = time.time_ns() // 1_000_000 + 1_000
            for start in range(0, n, BATCH):
                size = min(BATCH, n - start)
                store.put_batch([PutRequest(TOPIC, body, delay_level=1) if kind == "level"
                                 else PutRequest(TOPIC, body, deliver_at=due)
                                 for _ in range(size)])
            now = time.time_ns() // 1_000_000 + 10_000
            clock = functools.partial(int, now)
            done, offset = 0, 0
            cpu0 = time.process_time()
            while done < n:
                if kind == "level":
                    result = store.handover(1, offset, ENGINE_CALL, now_ms=now)
                    offset = result.next_offset
                    done += result.delivered
                else:
                    done += store.handover_timers(ENGINE_CALL, 0, clock).delivered
            figures.append((time.process_time() - cpu0) * 1e6 / n)
        finally:
            store.close()
            shutil.rmtree(home, ignore_errors=True)
    return min(figures), statistics.median(figures)


def phase_engine(n: int, report: Report) -> None:
    report.add(f"\n== engine: {n:,} level-1 messages due, handed over in-process "
               f"{ENGINE_CALL:,} a call")
    best, median = engine_handover_cpu("level", n)
    report.add(f"store engine CPU per message  best {best:5.2f} us, median {median:5.2f} us")


# ---- Celery's own countdown, for comparison ---------------------------------------------------

def celery_app(broker: str) -> Any:
    from celery import Celery

    app = Celery("bench_countdown", broker=broker, set_as_current=False)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True,
                    worker_hijack_root_logger=False, worker_send_task_events=False,
                    worker_enable_remote_control=False)
    arrivals = redis.Redis.from_url(broker)

    @app.task(name="bench.arrive", ignore_result=True)  # type: ignore[untyped-decorator]
    def arrive(deliver_ms: int) -> None:
        arrivals.rpush(CELERY_ARRIVALS, time.time_ns() // 1_000_000 - deliver_ms)

    return app


def run_celery_worker(broker: str) -> None:
    app = celery_app(broker)
    app.worker_main(["--quiet", "worker", "-P", "solo", "-l", "WARNING", "--without-gossip",
                     "--without-mingle", "--without-heartbeat"])


def phase_celery(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== celery countdown: {n:,} tasks, countdown 1/5/10/30 s, one worker (solo)")
    broker = stack.redis.url.rsplit("/", 1)[0] + "/1"
    worker = Process("celery-countdown", [sys.executable, __file__, "_celery-worker", broker],
                     log_dir=stack.home / "logs").start()
    app = celery_app(broker)
    task = app.tasks["bench.arrive"]
    time.sleep(3.0)
    lock = threading.Lock()
    todo = iter(range(n))

    def send() -> None:
        with app.producer_or_acquire() as producer:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                delay_s = LEVEL_DELAYS_S[i % 4 + 1]
                deliver_ms = time.time_ns() // 1_000_000 + delay_s * 1_000
                task.apply_async(args=(deliver_ms,), countdown=delay_s, producer=producer)

    started = time.perf_counter()
    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    report.add(f"enqueue rate                 {n / seconds:10,.0f} tasks/s  ({seconds:.1f} s)")
    r = redis.Redis.from_url(broker)
    deadline = time.monotonic() + 120 + max(LEVEL_DELAYS_S.values())
    while r.llen(CELERY_ARRIVALS) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    values = [int(v) for v in r.lrange(CELERY_ARRIVALS, 0, -1)]  # type: ignore[union-attr]
    report.add(lateness_line("celery countdown lateness", values))
    report.add(f"arrived                      {len(values):10,d} of {n:,}")
    report.add(f"worker peak RSS              {mb(proc_status(worker.pid, 'VmHWM')):>10}")
    report.add(f"redis used_memory            {mb(stack.redis_used_memory()):>10}")
    worker.stop()


# ---- main -------------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "_celery-worker":
        run_celery_worker(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small N: a smoke run")
    parser.add_argument("--messages", type=int, help="lateness / celery workload (100,000)")
    parser.add_argument("--drain", type=int, help="drain backlog (100,000)")
    parser.add_argument("--pending", type=int, help="pending long-delay messages (1,000,000)")
    parser.add_argument("--skip", default="", help="comma list of phases to skip: "
                        "lateness,drain,engine,celery,pending")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home")
    args = parser.parse_args()
    n = args.messages or (10_000 if args.quick else 100_000)
    drain = args.drain or (10_000 if args.quick else 100_000)
    pending = args.pending or (100_000 if args.quick else 1_000_000)
    skip = set(filter(None, args.skip.split(",")))
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-"))
    report = Report()
    report.add(f"delay_delivery bench: home {home}, {os.cpu_count()} CPUs, "
               f"load {os.getloadavg()[0]:.1f}")
    stack = DeliveryStack(home)
    try:
        stack.http.create_topic(TOPIC, 4)
        if "lateness" not in skip:
            phase_lateness(stack, n, report)
        if "drain" not in skip:
            phase_drain(stack, drain, report)
        if "engine" not in skip:
            phase_engine(drain, report)
        if "celery" not in skip:
            phase_celery(stack, n, report)
        if "pending" not in skip:
            phase_pending(stack, pending, report)
    finally:
        stack.close()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    free_port()  # fail early if sockets are unavailable
    sys.exit(main())
