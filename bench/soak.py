"""Soak: the whole local stack under a steady mixed load for a long time.

    .venv/bin/python -m bench.soak [--minutes 10] [--rate 200] [--retention-minutes 2]

Starts ``python -m tools.stack`` of its own (its own CLEPSYDRA_HOME and ports, CommitLog
segments of ``--segment-mb``, retention of ``--retention-minutes`` so retention runs within the
soak) and, from this process, sends ``--rate`` messages a second with ``Producer.send_async``:
half immediate, half delayed by levels 1-3 (1 s, 5 s, 10 s). Two push consumer groups take
them: one passes everything, one fails every 20th message once (retried after 1 s). Every
minute it prints what was sent and consumed, the lateness of delayed messages (first delivery
time minus due time: p50, p99, max), errors, the resident memory of every process of the stack
and the store's disk use; at the end each process's memory at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scratch import scratch_dir
from bench.stack_memory import rss_by_part
from clepsydra_client import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeResult,
    Producer,
    PushConsumer,
)
from tests.fixtures.stack import launch_stack, stop_stack

TOPIC = "soak"
DELAYS_MS = {0: 0, 1: 1000, 2: 5000, 3: 10000}
LEVELS = (0, 1, 0, 2, 0, 3)
FAIL_EVERY = 20


@dataclass
class Books:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0
    send_errors: int = 0
    consumed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lateness_ms: list[int] = field(default_factory=list)
    early: int = 0

    def take(self) -> tuple[int, int, dict[str, int], list[int], int]:
        with self.lock:
            out = (self.sent, self.send_errors, dict(self.consumed), self.lateness_ms,
                   self.early)
            self.sent, self.send_errors, self.early = 0, 0, 0
            self.consumed, self.lateness_ms = defaultdict(int), []
            return out


def _dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def produce(producer: Producer, books: Books, rate: float, stop: threading.Event) -> None:
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        level = LEVELS[n % len(LEVELS)]
        due = int(time.time() * 1000) + DELAYS_MS[level]
        future = producer.send_async(TOPIC, json.dumps({"n": n, "due": due}),
                                     delay_level=level)
        future.add_done_callback(lambda f: _sent(books, f))
        n += 1
        next_at += 1.0 / rate
        pause = next_at - time.monotonic()
        if pause > 0:
            stop.wait(pause)


def _sent(books: Books, future: Any) -> None:
    with books.lock:
        if future.exception() is None:
            books.sent += 1
        else:
            books.send_errors += 1


def listener(group: str, books: Books, fail: bool) -> Any:
    def consume(messages: Any, context: Any) -> ConsumeResult:
        now = int(time.time() * 1000)
        for m in messages:
            body = json.loads(m.body)
            if fail and body["n"] % FAIL_EVERY == 0 and m.reconsume_times == 0:
                context.delay_level_when_next_consume = 1
                return ConsumeResult.RECONSUME_LATER
            with books.lock:
                books.consumed[group] += 1
                if m.reconsume_times == 0 and group == "soak-pass":
                    books.lateness_ms.append(now - body["due"])
                    books.early += now < body["due"]
        return ConsumeResult.SUCCESS
    return consume


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--retention-minutes", type=float, default=2.0)
    parser.add_argument("--segment-mb", type=int, default=4)
    args = parser.parse_args()
    home = scratch_dir("clepsydra-soak-") / "home"
    stack = launch_stack(home, "--quiet", CLEPSYDRA_OTEL_EXPORTER="none",
                         CLEPSYDRA_STORE_SEGMENT_BYTES=str(args.segment_mb << 20),
                         CLEPSYDRA_STORE_RETENTION_HOURS=str(args.retention_minutes / 60))
    books = Books()
    stop = threading.Event()
    consumers: list[PushConsumer] = []
    try:
        admin = AdminClient(stack.store_url, stack.retry_url)
        admin.create_topic(TOPIC, 4)
        for group, fail in (("soak-pass", False), ("soak-fail", True)):
            consumer = PushConsumer(group, stack.store_url, stack.retry_url,
                                    consume_from_where=ConsumeFromWhere.FIRST)
            consumer.subscribe(TOPIC, "*")
            consumer.register_concurrent(listener(group, books, fail))
            consumer.start()
            consumers.append(consumer)
        producer = Producer(stack.store_url)
        sender = threading.Thread(target=produce, args=(producer, books, args.rate, stop),
                                  daemon=True)
        first_rss = rss_by_part(stack)
        sender.start()
        print(f"soak: {args.minutes:g} min at {args.rate:g} msg/s, retention "
              f"{args.retention_minutes:g} min, segments {args.segment_mb} MiB; "
              f"stack home {home}", flush=True)
        print(f"{'min':>4} {'sent':>7} {'errors':>6} {'pass':>7} {'fail-grp':>8} "
              f"{'late p50':>8} {'p99':>6} {'max':>6} {'early':>5} {'RSS MiB':>8} "
              f"{'store disk MiB':>14} {'segments':>8}", flush=True)
        end_at = time.monotonic() + args.minutes * 60
        minute = 0
        while time.monotonic() < end_at:
            time.sleep(min(60.0, max(0.0, end_at - time.monotonic())))
            minute += 1
            sent, errors, consumed, late, early = books.take()
            rss = rss_by_part(stack)
            segments = len(list((home / "store" / "commitlog").glob("*")))
            print(f"{minute:>4} {sent:>7} {errors:>6} {consumed.get('soak-pass', 0):>7} "
                  f"{consumed.get('soak-fail', 0):>8} {_percentile(late, 0.5):>8} "
                  f"{_percentile(late, 0.99):>6} {max(late, default=0):>6} {early:>5} "
                  f"{sum(rss.values()) / 1024:>8.0f} "
                  f"{_dir_bytes(home / 'store') / (1 << 20):>14.1f} {segments:>8}",
                  flush=True)
        stop.set()
        sender.join(10)
        producer.close()
        last_rss = rss_by_part(stack)
        print("\nresident memory per part (MiB): start -> end")
        for part in sorted(set(first_rss) | set(last_rss)):
            print(f"  {part:<22} {first_rss.get(part, 0) / 1024:7.1f} -> "
                  f"{last_rss.get(part, 0) / 1024:7.1f}")
        restarts = stack.output().count("restarting")
        print(f"stack children restarted: {restarts}")
    finally:
        stop.set()
        for consumer in consumers:
            consumer.shutdown()
        stop_stack(stack)
    return 0


if __name__ == "__main__":
    sys.exit(main())
