"""A consumer process of the fault matrix: ``python -m tests.faults.consumer GROUP TOPIC OUT``.

A real ``PushConsumer`` (clustering, from the first offset) whose listener appends one JSON line
per attempt to OUT -- ``{"t": receive ms, "group", "seq", "phase", "reconsume", "ok"}`` -- before
it answers, so the file is the consumer's side of the data the matrix checks (at-least-once: a
line can exist for an attempt whose acknowledgement a crash lost; that is a duplicate, never a
loss). With ``--fail`` the listener fails messages by their ``seq``: ``seq % FAIL_ALWAYS == 0``
fails every time (dead-lettered after the group's retries), ``seq % FAIL_ONCE == 0`` fails its
first attempt only. A retry is asked for after one second (delay level 1). With ``--orderly``
the listener is an orderly one (per-queue order, queue locks) that never fails, and each line
also has the message's ``queue``, ``offset`` and ``shard`` (its store shard).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from typing import Any

from clepsydra_client import ConsumeFromWhere, ConsumeResult, OrderlyResult, PushConsumer
from clepsydra_client.settings import ClientSettings

FAIL_ALWAYS = 7
FAIL_ONCE = 5


def fails(seq: int, reconsume: int) -> bool:
    """Whether the failing group's listener fails this attempt."""
    return seq % FAIL_ALWAYS == 0 or (seq % FAIL_ONCE == 0 and reconsume == 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--orderly", action="store_true")
    args = parser.parse_args()
    settings = ClientSettings.from_env()
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lock = threading.Lock()

    def listener(messages: Any, context: Any) -> ConsumeResult:
        for m in messages:
            body = json.loads(m.body)
            ok = not (args.fail and fails(body["seq"], m.reconsume_times))
            line = {"t": int(time.time() * 1000), "group": args.group, "seq": body["seq"],
                    "phase": body["phase"], "reconsume": m.reconsume_times, "ok": ok}
            with lock:
                os.write(fd, (json.dumps(line) + "\n").encode())
            if not ok:
                context.delay_level_when_next_consume = 1
                return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(args.group, settings.store_url, settings.retry_url,
                            consume_from_where=ConsumeFromWhere.FIRST)
    consumer.subscribe(args.topic, "*")
    def orderly(messages: Any, context: Any) -> OrderlyResult:
        for m in messages:
            body = json.loads(m.body)
            line = {"t": int(time.time() * 1000), "group": args.group, "seq": body["seq"],
                    "phase": body["phase"], "reconsume": m.reconsume_times, "ok": True,
                    "queue": m.queue_id, "offset": m.queue_offset, "shard": m.shard}
            with lock:
                os.write(fd, (json.dumps(line) + "\n").encode())
        return OrderlyResult.SUCCESS

    if args.orderly:
        consumer.register_orderly(orderly)
    else:
        consumer.register_concurrent(listener)
    consumer.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("consumer ready", flush=True)
    stop.wait()
    consumer.shutdown()


if __name__ == "__main__":
    main()
