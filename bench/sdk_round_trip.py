"""Where the SDK's single send spends its round trip: one keep-alive client against the store
alone, three ways in turn, rounds alternating.

    .venv/bin/python -m bench.sdk_round_trip [--sends 4000] [--rounds 3]

  raw-plain     a raw socket sending ``{"body": ...}`` (``bench.store_produce.RawConnection``)
  raw-sdkshape  the same socket sending the bytes ``Producer.send`` sends (``UNIQ_KEY`` and an
                unsampled ``traceparent`` in the properties and the header, one per message:
                ``bench.instructions.requests_of``)
  sdk           ``Producer.send(topic, body)``

Each prints msgs/s, the round trip, the client's CPU a send (this process: ``process_time``)
and the store's (``/proc``, every thread: its poller's spin included, DEC-poller-spin). The
store is ``python -m clepsydra_store`` as ``make run`` runs it (one process, async flush).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

from bench.instructions import requests_of
from bench.scratch import scratch_dir
from bench.stack_cpu import process_cpu
from bench.store_produce import RawConnection
from clepsydra_client import AdminClient, Producer
from tools.parts import store_service

TOPIC = "bench"
BODY = "x" * 16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {"CLEPSYDRA_SINGLE_PROCESS": "true", "CLEPSYDRA_LOG_LEVEL": "WARNING",
           "CLEPSYDRA_OTEL_EXPORTER": "none"}
    store = store_service(scratch_dir("clepsydra-round-trip-"), env=env).start(60)
    try:
        AdminClient(store.url).create_topic(TOPIC, 4)
        producer = Producer(store.url)
        conn = RawConnection(store.url, f"/v1/topics/{TOPIC}/messages",
                             json.dumps({"body": BODY}).encode())
        shaped = iter(requests_of("sdk", conn.host, (args.sends + 100) * args.rounds))
        ways: dict[str, Callable[[], object]] = {
            "raw-plain": conn.send,
            "raw-sdkshape": lambda: conn.send(next(shaped)),
            "sdk": lambda: producer.send(TOPIC, BODY),
        }
        for _ in range(args.rounds):
            for name, send in ways.items():
                for _ in range(100):  # warm up
                    send()
                store0, client0 = sum(process_cpu(store.pid) or (0, 0)), time.process_time()
                start = time.perf_counter()
                for _ in range(args.sends):
                    send()
                wall = time.perf_counter() - start
                client = time.process_time() - client0
                served = sum(process_cpu(store.pid) or (0, 0)) - store0
                n = args.sends
                print(f"{name:13} {n / wall:7,.0f} msgs/s  round trip {wall / n * 1e6:6.1f} µs  "
                      f"client CPU {client / n * 1e6:5.1f} µs  store CPU {served / n * 1e6:6.1f} "
                      f"µs  load {os.getloadavg()[0]:.1f}", flush=True)
        producer.close()
        conn.close()
    finally:
        store.stop(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
