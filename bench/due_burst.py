"""A due burst on the whole local stack, measured as RocketMQ measures its timers:
K messages due in each one-second slot, S slots, the first slot due ``--ahead-s`` (two minutes)
after the run starts; lateness = the time a consumer receives a message - its deliver time.

    .venv/bin/python -m bench.due_burst [--cases one,slots] [--by timers,levels]
                                        [--ahead-s 120] [--set VAR=VALUE ...]
                                        [--profile DIR [--profile-s 8]]

Cases: ``one`` is 100,000 messages due in the same second (K=100,000, S=1), ``slots`` 10 slots
of 20,000 (``--one K`` and ``--slots KxS`` change them). Each case runs on a fresh stack
(``python -m tools.stack``, everything ``make run`` starts) and a topic of 4 queues, two ways:

  timers  ``deliverAt`` = the slot's first millisecond (all K of a slot due at the same
          instant), sent in batches of 100 from two threads before the first slot is due;
  levels  ``delayLevel`` 6 (2 minutes in the default table): a message's deliver time is its
          store time + 2 minutes, so the slots are made by sending K messages in each second
          (as many as the stack takes in that second: the due window printed says what was
          achieved; K in one second is more than one client's batches reach here).

A consumer process (the SDK's ``PushConsumer``, pulls of 1,000, listener batches of 100, on
its own process) writes for every message its deliver time (``DELIVER_TS``), the copy's store
time (when the scheduler handed it over) and when the listener got it. Printed per case:
delivered / duplicated / missing / early (before its deliver time), lateness p50 / p99 /
p99.9 / max and the share received within 1 s of the deliver time, the same for the hand-over
(store time of the copy - deliver time), and the drain rate (messages / (last hand-over - first
deliver time)). Published anchors printed beside (RocketMQ's own figures, other hardware):
of 500,000 timers due in one second "maybe only 20,000" are on time (apache/rocketmq#6566);
RocketMQ 4.x delay levels write and deliver 30k+ messages a second (apache/rocketmq#3449).
The store's requests by operation in the window are printed too; ``--profile DIR`` adds
py-spy of every process of the stack and the consumer over the first ``--profile-s`` of it.
The target (docs/performance.md): 100,000 due in one second all delivered within 2 s, none
early.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from bench.peers_apps import serve_consumer
from bench.scratch import scratch_dir
from bench.stack_cpu import CpuWindow, Profiles, stack_processes, store_requests
from bench.threads import run_threads
from tests.fixtures.stack import launch_stack, stop_stack
from tools.processes import Process, wait_until

TOPIC = "burst"
GROUP = "burst-consumer"
QUEUES = 4
BATCH = 100
LEVEL = 6
LEVEL_MS = 120_000
"""Level 6 of the default table (``1s 5s 10s 30s 1m 2m ...``)."""
ANCHORS = ("RocketMQ, a maintainer (apache/rocketmq#6566): of 500,000 timers due in one second "
           "\"maybe only 20,000\" on time (4 %)",
           "RocketMQ 4.x delay levels (apache/rocketmq#3449): 30k+ messages a second written "
           "and delivered")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- the consumer process --------------------------------------------------------------------

def consume_main(store_url: str, out: str) -> int:
    """``python -m bench.due_burst --consume STORE_URL OUT``: one line a message,
    ``id,deliver_ts,store_ts,received_ms``, until killed."""
    from clepsydra_client import ConsumeResult

    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def listener(messages: list, _context: object) -> ConsumeResult:  # type: ignore[type-arg]
        received = now_ms()
        os.write(fd, "".join(
            f"{m.body.decode()},{m.properties.get('DELIVER_TS', 0)},{m.store_timestamp},"
            f"{received}\n" for m in messages).encode())
        return ConsumeResult.SUCCESS

    serve_consumer(store_url, TOPIC, GROUP, listener, pull_batch_size=1000,
                   consume_batch_size=100, consume_threads=4)
    return 0


# ---- producing --------------------------------------------------------------------------------

class Sender:
    """Batches of 100 over keep-alive sessions, from ``threads`` threads."""

    def __init__(self, store_url: str, threads: int = 2) -> None:
        self.url = f"{store_url}/v1/topics/{TOPIC}/messages/batch"
        self.threads = threads
        self._local = threading.local()

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "s"):
            self._local.s = requests.Session()
        return self._local.s  # type: ignore[no-any-return]

    def send(self, first_id: int, n: int, fields: Callable[[int], dict[str, int]]) -> None:
        """Messages ``first_id .. first_id + n - 1``, each with ``fields(id)``."""
        starts = iter(range(first_id, first_id + n, BATCH))
        lock = threading.Lock()

        def loop(_index: int) -> None:
            while True:
                with lock:
                    start = next(starts, None)
                if start is None:
                    return
                end = min(start + BATCH, first_id + n)
                body = json.dumps({"messages": [{"body": str(i), **fields(i)}
                                                for i in range(start, end)]}).encode()
                self._session().post(self.url, data=body, timeout=60, headers={
                    "content-type": "application/json"}).raise_for_status()

        run_threads(loop, self.threads)


# ---- one case ---------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    per_slot: int
    slots: int

    @property
    def total(self) -> int:
        return self.per_slot * self.slots


def q(values: list[int], fraction: float) -> int:
    return values[min(len(values) - 1, int(fraction * len(values)))] if values else 0


def lateness_line(label: str, values: list[int]) -> str:
    values = sorted(values)
    if not values:
        return f"  {label:<22} (none)"
    within = sum(1 for v in values if 0 <= v <= 1000) / len(values)
    return (f"  {label:<22} p50 {q(values, 0.5):>7,} ms  p99 {q(values, 0.99):>7,}  "
            f"p99.9 {q(values, 0.999):>7,}  max {values[-1]:>7,}  within 1 s "
            f"{100 * within:5.1f} %  early {sum(1 for v in values if v < 0):,}")


def run_case(case: Case, by: str, args: argparse.Namespace, root: Path,
             settings: dict[str, str]) -> list[str]:
    work = root / f"{case.name}-{by}"
    work.mkdir(parents=True)
    stack = launch_stack(work / "home", "--quiet", CLEPSYDRA_OTEL_EXPORTER="none", **settings)
    out = work / "received.csv"
    consumer: Process | None = None
    lines = [f"\n== {case.name} by {by}: {case.per_slot:,} due in each of {case.slots} "
             f"one-second slot(s), {case.total:,} in all, first due {args.ahead_s:g} s ahead"]
    try:
        from clepsydra_client import AdminClient

        AdminClient(stack.store_url).create_topic(TOPIC, QUEUES)
        consumer = Process("consumer", [sys.executable, "-m", "bench.due_burst", "--consume",
                                        stack.store_url, str(out)], log_dir=work).start()
        sender = Sender(stack.store_url)
        t_start = time.perf_counter()
        if by == "timers":
            first_due = now_ms() + int(args.ahead_s * 1000)
            first_due -= first_due % 1000
            first_due_ms = first_due
            sender.send(0, case.total, lambda i: {"deliverAt": first_due
                                                  + 1000 * (i // case.per_slot)})
            took = time.perf_counter() - t_start
            lines.append(f"  produced {case.total:,} timers in {took:.1f} s "
                         f"({case.total / took:,.0f} msgs/s) before the first was due")
        else:
            wait_s = args.ahead_s - LEVEL_MS / 1000  # level 6 is due 2 minutes after its send
            time.sleep(max(0.0, wait_s))
            first_due_ms = now_ms() + LEVEL_MS
            slot0 = time.monotonic()
            for slot in range(case.slots):
                sender.send(slot * case.per_slot, case.per_slot, lambda i: {"delayLevel": LEVEL})
                rest = slot0 + slot + 1 - time.monotonic()
                if rest > 0 and slot + 1 < case.slots:
                    time.sleep(rest)
            took = time.perf_counter() - t_start - max(0.0, wait_s)
            lines.append(f"  produced {case.total:,} level-{LEVEL} messages in {took:.1f} s "
                         f"({case.total / took:,.0f} msgs/s), {case.slots} slot(s) aimed at")
        time.sleep(max(0.0, (first_due_ms - now_ms()) / 1000 - 1.0))  # the window: from 1 s
        calls0 = store_requests(stack.store_url)
        profiles = None
        if args.profile is not None:
            python = {"consumer": consumer.pid} | {
                name: pid for pid, name in stack_processes(stack).items()
                if name not in ("redis", "supervisor")}
            profiles = Profiles(python, args.profile_s, args.profile / f"{case.name}-{by}",
                                gil=args.gil).start()
        with CpuWindow(stack, {"consumer": consumer.pid, "bench (this process)": os.getpid()},
                       thread_parts=("store",)) as window:  # before the first due time
            try:
                wait_until(lambda: _count(out) >= case.total,
                           args.ahead_s + case.slots + args.grace_s, interval_s=0.5,
                           what="every message received")
            except TimeoutError:
                lines.append(f"  NOT all received within {args.grace_s:g} s after the last slot")
            time.sleep(2.0)  # a late duplicate would show here
        calls = store_requests(stack.store_url) - calls0
        lines += summary(out, case)
        lines.append("  the store's requests by operation in that window: " + ", ".join(
            f"{op} {n:,}" for op, n in calls.most_common()))
        if profiles is not None:
            from bench.peers import print_profiles

            print_profiles(f"{case.name}-{by}", profiles)
        lines.append("  the cores' time from 1 s before the first deliver time to the last message "
                     "received:")
        lines.append(window.table(("msg", case.total)))
    finally:
        if consumer is not None:
            consumer.stop()
        stop_stack(stack)
    for line in lines:
        print(line, flush=True)
    return lines


def _count(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def summary(out: Path, case: Case) -> list[str]:
    rows = []
    for line in out.read_text().splitlines():
        parts = line.split(",")
        if len(parts) == 4:
            rows.append(tuple(int(p) for p in parts))
    seen = Counter(r[0] for r in rows)
    first: dict[int, tuple[int, int, int, int]] = {}
    for r in rows:
        first.setdefault(r[0], r)
    missing = sum(1 for i in range(case.total) if i not in seen)
    dup = sum(1 for c in seen.values() if c > 1)
    received = [r[3] - r[1] for r in first.values()]
    handed = [r[2] - r[1] for r in first.values()]
    due = sorted(r[1] for r in first.values())
    per_second = Counter((d - due[0]) // 1000 for d in due) if due else Counter()
    lines = [f"  received {len(first):,} of {case.total:,}, missing {missing:,}, "
             f"duplicated {dup:,}; deliver times span {(due[-1] - due[0]) / 1000 if due else 0:.1f}"
             f" s (messages due per second: "
             + ", ".join(f"{per_second[s]:,}" for s in sorted(per_second)[:12]) + ")",
             lateness_line("received - deliver", received),
             lateness_line("handed over - deliver", handed)]
    if handed and due:
        last = max(r[2] for r in first.values())
        lines.append(f"  drain: {len(first):,} handed over between the first deliver time and "
                     f"{(last - due[0]) / 1000:.2f} s after it "
                     f"({len(first) / max((last - due[0]) / 1000, 1e-3):,.0f} msgs/s)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="one,slots")
    parser.add_argument("--by", default="timers,levels")
    parser.add_argument("--one", type=int, default=100_000, help="K of the one-slot case")
    parser.add_argument("--slots", default="20000x10", help="KxS of the slots case")
    parser.add_argument("--ahead-s", type=float, default=120.0)
    parser.add_argument("--grace-s", type=float, default=180.0)
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy of the store, the consumer and the other services from 1 s "
                             "before the first deliver time, for --profile-s")
    parser.add_argument("--profile-s", type=float, default=8.0)
    parser.add_argument("--gil", action="store_true",
                        help="profile only the thread holding the interpreter's lock")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE")
    parser.add_argument("--consume", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consume:
        return consume_main(*args.consume)
    settings = {}
    for item in args.set:
        var, _, value = item.partition("=")
        settings[var] = os.environ[var] = value
    k, _, s = args.slots.partition("x")
    cases = {"one": Case("one", args.one, 1), "slots": Case("slots", int(k), int(s))}
    if args.ahead_s < LEVEL_MS / 1000 and "levels" in args.by:
        raise SystemExit(f"--ahead-s must be at least {LEVEL_MS // 1000} for levels")
    root = scratch_dir("clepsydra-burst-")  # removed at exit (CLEPSYDRA_BENCH_KEEP=1 keeps it)
    print(f"due_burst under {root}" + (f", settings {' '.join(args.set)}" if args.set else ""),
          flush=True)
    for anchor in ANCHORS:
        print(f"  anchor: {anchor}")
    for name in args.cases.split(","):
        for by in args.by.split(","):
            run_case(cases[name], by, args, root, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
