"""Consume benchmark: the client SDK end to end (produce -> store -> push consumers).

    .venv/bin/python -m bench.consume [--quick] [--messages N] [--pull-batch 256]
                                      [--consume-batch 1] [--only one,four,failing]

Everything runs as real processes on free ports under a temporary CLEPSYDRA_HOME: one
redis-server, the store, the retry service, the scheduler's worker and beat, and every
consumer as its own process (``PushConsumer``, clustering, FIRST). Phases:

  produce  N messages (100-byte bodies) to an 8-queue topic, batches of 100 from 2 threads
  one      1 consumer drains them (its own group): N / (last consumed - consumer started)
  four     4 consumers drain them (another group; target >= 10,000 msgs/s)
  failing  4 consumers (a third group); every 10th message fails on its first delivery and
           asks for level 1 (1 s): time until every message was consumed successfully
  live     4 consumers on a fresh topic while N messages are produced: N / (last consumed -
           first sent), what a message sees from send to listener (bounded by the produce rate)

``--quick``: 10,000 messages.
The machine is shared (+-40 % between runs seen here); the figures printed are what was
measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from clepsydra_client.admin import AdminClient
from clepsydra_client.producer import OutgoingMessage, Producer
from tools import parts
from tools.processes import Process, wait_until

REPO = Path(__file__).resolve().parents[1]

QUEUES = 8
PRODUCE_BATCH = 100
TARGET_FOUR = 10_000


# ---- consumer process ------------------------------------------------------------------------

def run_worker(args: argparse.Namespace) -> int:
    """One consumer process: counts successes, fails every ``fail_every``-th message once."""
    from clepsydra_client.consumer.listener import ConsumeFromWhere, ConsumeResult
    from clepsydra_client.consumer.push import PushConsumer

    lock = threading.Lock()
    counts = {"ok": 0, "failed": 0}

    def listener(messages: list[Any], context: Any) -> ConsumeResult:
        failed_any = False
        for m in messages:
            n = int(m.text.split(":", 1)[0])
            if args.fail_every and n % args.fail_every == 0 and m.reconsume_times == 0:
                failed_any = True
        if failed_any:
            context.delay_level_when_next_consume = 1
            with lock:
                counts["failed"] += len(messages)
            return ConsumeResult.RECONSUME_LATER
        with lock:
            counts["ok"] += len(messages)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(args.group, args.store, args.retry,
                            consume_from_where=ConsumeFromWhere.FIRST,
                            pull_batch_size=args.pull_batch,
                            consume_batch_size=args.consume_batch,
                            heartbeat_interval_s=1.0, persist_interval_s=1.0,
                            pull_idle_max_s=0.05, instance_name=args.name)
    consumer.subscribe(args.topic)
    consumer.register_concurrent(listener)
    consumer.start()
    status = Path(args.status)
    try:
        while True:
            with lock:
                data = {**counts, "owned": len(consumer.owned_queues()),
                        "stats": consumer.stats.snapshot()}
            tmp = status.with_name(status.name + ".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, status)
            time.sleep(0.1)  # the bench's own status file: kept cheap beside the consumer
    except KeyboardInterrupt:
        return 0
    finally:
        consumer.shutdown()


# ---- orchestration ---------------------------------------------------------------------------

def start_stack(root: Path) -> parts.Stack:
    """Redis, the store, the retry service and the scheduler (worker + beat): the one stack
    builder, tools/parts.py, under ``root``."""
    return (parts.Stack(root).with_redis().with_store()
            .with_retry(CLEPSYDRA_LOG_LEVEL="WARNING").with_scheduler().start())


class Worker(Process):
    def __init__(self, stack: parts.Stack, name: str, *, group: str, topic: str,
                 args: argparse.Namespace, fail_every: int) -> None:
        self.status_path = stack.home / f"{name}.status.json"
        argv = [sys.executable, "-m", "bench.consume", "--worker", "--store", stack.store.url,
                "--retry", stack.retry.url, "--group", group, "--topic", topic,
                "--status", str(self.status_path), "--name", name,
                "--pull-batch", str(args.pull_batch), "--consume-batch", str(args.consume_batch),
                "--fail-every", str(fail_every)]
        super().__init__(name, argv, env={"CLEPSYDRA_LOG_LEVEL": "WARNING"},
                         log_dir=stack.log_dir)

    def status(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.status_path.read_text())
            return data
        except (FileNotFoundError, ValueError):
            return {}


def produce(producer: Producer, topic: str, n: int, threads: int = 2) -> float:
    """Send n messages in batches from ``threads`` threads; returns the seconds it took."""
    body_pad = "x" * 90
    started = time.monotonic()

    def part(offset: int) -> None:
        for start in range(offset * PRODUCE_BATCH, n, PRODUCE_BATCH * threads):
            end = min(start + PRODUCE_BATCH, n)
            producer.send_batch(topic, [OutgoingMessage(f"{i}:{body_pad}")
                                        for i in range(start, end)])

    workers = [threading.Thread(target=part, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.monotonic() - started


def phase(stack: parts.Stack, name: str, *, topic: str, consumers: int, n: int, fail_every: int,
          args: argparse.Namespace, produce_now: bool) -> dict[str, Any]:
    """One group of ``consumers`` processes drains ``n`` messages of ``topic`` (already
    there, or produced now while they run)."""
    group = f"bench-{name}"
    admin = AdminClient(stack.store.url, stack.retry.url)
    admin.set_group_settings(group)
    workers = [Worker(stack, f"{name}-c{i}", group=group, topic=topic, args=args,
                      fail_every=fail_every) for i in range(consumers)]
    produce_s = None
    try:
        if produce_now:
            for w in workers:
                w.start()
            wait_until(lambda: sum(w.status().get("owned", 0) for w in workers) >= QUEUES, 60,
                       0.1, what="every queue owned")
            time.sleep(2.5)  # hand-over graces passed: every consumer pulls its queues
            t0 = time.monotonic()
            producer = Producer(stack.store.url)
            produce_s = produce(producer, topic, n)
            producer.close()
        else:
            t0 = time.monotonic()
            for w in workers:
                w.start()

        def ok() -> int:
            for w in workers:
                if not w.alive():
                    raise RuntimeError(f"consumer {w.name} exited:\n{w.log()[-3000:]}")
            return sum(w.status().get("ok", 0) for w in workers)

        wait_until(lambda: ok() >= n, 900, 0.02, what=f"{n} consumed")
        elapsed = time.monotonic() - t0
        stats: dict[str, int] = {}
        for w in workers:
            for k, v in w.status().get("stats", {}).items():
                stats[k] = stats.get(k, 0) + v
        return {"phase": name, "consumers": consumers, "messages": n,
                "while_producing": produce_now,
                "produce_msgs_s": round(n / produce_s) if produce_s else None,
                "elapsed_s": round(elapsed, 2), "msgs_s": round(n / elapsed),
                "consumed_ok": ok(), "sent_back": stats.get("sent_back", 0),
                "duplicates": max(ok() - n, 0)}
    finally:
        for w in workers:
            w.stop()
        admin.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="10,000 messages")
    p.add_argument("--messages", type=int)
    p.add_argument("--pull-batch", type=int, default=256)
    p.add_argument("--consume-batch", type=int, default=1)
    p.add_argument("--only", default="one,four,failing,live")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    # worker mode
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--retry", help=argparse.SUPPRESS)
    p.add_argument("--group", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--status", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--fail-every", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        import signal

        def stop(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        return run_worker(args)

    n = args.messages or (10_000 if args.quick else 100_000)
    only = set(args.only.split(","))
    root = Path(tempfile.mkdtemp(prefix="clepsydra-bench-consume-"))
    print(f"consume benchmark: {n} messages, pull batch {args.pull_batch}, consume batch "
          f"{args.consume_batch}, {os.cpu_count()} cores, data in {root}", flush=True)
    stack = start_stack(root)
    results = []
    try:
        admin = AdminClient(stack.store.url, stack.retry.url)
        for topic in ("bench-backlog", "bench-live"):
            admin.create_topic(topic, QUEUES)
        admin.close()
        producer = Producer(stack.store.url)
        produce_s = produce(producer, "bench-backlog", n)
        producer.close()
        print(json.dumps({"phase": "produce", "messages": n, "seconds": round(produce_s, 2),
                          "msgs_s": round(n / produce_s)}), flush=True)
        plan = [("one", "bench-backlog", 1, 0, False), ("four", "bench-backlog", 4, 0, False),
                ("failing", "bench-backlog", 4, 10, False), ("live", "bench-live", 4, 0, True)]
        for name, topic, consumers, fail_every, live in plan:
            if name not in only:
                continue
            result = phase(stack, name, topic=topic, consumers=consumers, n=n,
                           fail_every=fail_every, args=args, produce_now=live)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"produce: {n} messages in batches of {PRODUCE_BATCH}: {round(n / produce_s)} msgs/s")
    print(f"{'phase':<8} {'consumers':>9} {'messages':>9} {'msgs/s':>8} {'all consumed after':>19}"
          "  note")
    notes = {"one": "backlog drained", "four": "backlog drained",
             "failing": "backlog, 10% fail once at level 1",
             "live": "produced while consuming (send -> listener)"}
    for r in results:
        print(f"{r['phase']:<8} {r['consumers']:>9} {r['messages']:>9} {r['msgs_s']:>8} "
              f"{r['elapsed_s']:>18}s  {notes[r['phase']]}")
    four = next((r for r in results if r["phase"] == "four"), None)
    if four:
        verdict = "meets" if four["msgs_s"] >= TARGET_FOUR else "below"
        print(f"4 consumers: {four['msgs_s']} msgs/s ({verdict} the {TARGET_FOUR:,} msgs/s "
              "target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
