"""A push consumer in its own process, for tests that kill consumers (SIGKILL) or need a
process-wide tracer: ``python tests/integration/client/consumer_proc.py --group G --topic T
--out consumed.jsonl --status status.json``.

Each consumed message is one JSON line ``{body, client, start, end, reconsumeTimes, traceId}``
written when the listener returns; ``status`` is rewritten every 100 ms with the owned queues
and the counters. A body ending in ``!fail`` fails on its first delivery.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from clepsydra_client.consumer.listener import ConsumeFromWhere, ConsumeResult
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.message import Message
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.logging import configure


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--retry")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--heartbeat-s", type=float, default=0.3)
    p.add_argument("--name")
    args = p.parse_args()
    configure(os.environ.get("CLEPSYDRA_LOG_LEVEL", "INFO"))

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    telemetry.init_tracing("clepsydra-test-consumer",
                           os.environ.get("CLEPSYDRA_OTEL_EXPORTER", "none"))
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - closed at exit

    consumer = PushConsumer(args.group, args.store, args.retry, instance_name=args.name,
                            heartbeat_interval_s=args.heartbeat_s, persist_interval_s=0.3,
                            pull_idle_max_s=0.05, consume_threads=4,
                            consume_from_where=ConsumeFromWhere.FIRST)

    def listener(messages: list[Message], context: object) -> ConsumeResult:
        m = messages[0]
        start = time.time()
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        failed = m.text.endswith("!fail") and m.reconsume_times == 0
        line = json.dumps({"body": m.text, "client": consumer.client_id, "start": start,
                           "end": time.time(), "reconsumeTimes": m.reconsume_times,
                           "topic": m.topic, "storeTopic": m.store_topic,
                           "traceId": m.trace_id, "failed": failed})
        with lock:
            out.write(line + "\n")
            out.flush()
        return ConsumeResult.RECONSUME_LATER if failed else ConsumeResult.SUCCESS

    consumer.subscribe(args.topic)
    consumer.register_concurrent(listener)
    consumer.start()
    status = Path(args.status)
    try:
        while True:
            tmp = status.with_name(status.name + ".tmp")
            tmp.write_text(json.dumps({
                "client": consumer.client_id, "pid": os.getpid(),
                "owned": [[q.topic, q.queue_id] for q in consumer.owned_queues()],
                "stats": consumer.stats.snapshot()}))
            os.replace(tmp, status)
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.shutdown()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
