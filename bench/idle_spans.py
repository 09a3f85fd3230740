"""Spans an idle stack exports: the local stack (``python -m tools.stack``), one
push consumer long-polling an empty topic, health probes every 5 s and a metrics scrape every
15 s on the store and the retry service, as Kubernetes and Prometheus would; every process writes
its spans to one file (``CLEPSYDRA_OTEL_EXPORTER=file:<path>``). Prints spans per second over
the measured window, by service and span name.

    python -m bench.idle_spans [--warmup-s 10] [--window-s 30]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from bench.scratch import scratch_dir
from tools.processes import free_port

REPO = Path(__file__).resolve().parent.parent


def count_lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    args = parser.parse_args()
    home = scratch_dir("clepsydra-idle-")
    spans_file = home / "spans.jsonl"
    store_port, retry_port, redis_port = free_port(), free_port(), free_port()
    env = {**os.environ, "CLEPSYDRA_HOME": str(home), "CLEPSYDRA_STORE_PORT": str(store_port),
           "CLEPSYDRA_RETRY_PORT": str(retry_port), "CLEPSYDRA_REDIS_PORT": str(redis_port),
           "CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}"}
    env.pop("CLEPSYDRA_REDIS_URL", None)
    stack = subprocess.Popen([sys.executable, "-m", "tools.stack", "--quiet"], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert stack.stdout is not None
        for line in stack.stdout:
            if "clepsydra: ready" in line:
                break
        else:
            raise SystemExit("the stack did not start")
        threading.Thread(target=lambda: [None for _ in stack.stdout or ()], daemon=True).start()
        store, retry = f"http://127.0.0.1:{store_port}", f"http://127.0.0.1:{retry_port}"
        os.environ.update({"CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_file}"})
        from clepsydra_client.admin import AdminClient
        from clepsydra_client.consumer.push import PushConsumer

        AdminClient(store, retry).create_topic("Idle", queues=4)
        consumer = PushConsumer("IdleGroup", store, retry).subscribe("Idle")
        consumer.register_concurrent(lambda msgs, ctx: None)  # type: ignore[arg-type,return-value]
        consumer.start()
        stop = threading.Event()

        def probes() -> None:
            tick = 0
            while not stop.wait(5.0):
                for base in (store, retry):
                    requests.get(base + "/healthz", timeout=5)
                    if tick % 3 == 0:
                        requests.get(base + "/metrics", timeout=5)
                tick += 1

        threading.Thread(target=probes, daemon=True).start()
        time.sleep(args.warmup_s)
        before = len(count_lines(spans_file))
        started = time.monotonic()
        time.sleep(args.window_s)
        spans = count_lines(spans_file)[before:]
        elapsed = time.monotonic() - started
        stop.set()
        consumer.shutdown()
        by_name = collections.Counter(f"{s['service']} {s['name']}" for s in spans)
        print(f"idle stack: {len(spans)} spans in {elapsed:.1f} s = "
              f"{len(spans) / elapsed:.2f} spans/s")
        for name, n in by_name.most_common():
            print(f"  {n / elapsed:7.2f}/s  {name}")
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(60)


if __name__ == "__main__":
    main()
