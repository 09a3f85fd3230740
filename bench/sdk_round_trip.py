"""Where the SDK's single send spends its round trip: one keep-alive client against the store
alone, three ways in turn, rounds alternating.

    .venv/bin/python -m bench.sdk_round_trip [--sends 4000] [--rounds 3]
    .venv/bin/python -m bench.sdk_round_trip --bytecodes [--base /path/to/other/worktree]

  raw-plain     a raw socket sending ``{"body": ...}`` (``bench.raw_client.RawConnection``)
  raw-sdkshape  the same socket sending the bytes ``Producer.send`` sends (``UNIQ_KEY`` and an
                unsampled ``traceparent`` in the properties and the header, one per message:
                ``bench.instructions.requests_of``)
  sdk           ``Producer.send(topic, body)``

Each prints msgs/s, the round trip, the client's CPU a send (this process: ``process_time``)
and the store's (``/proc``, every thread: its poller's spin included, DEC-poller-spin). The
store is ``python -m clepsydra_store`` as ``make run`` runs it (one process, async flush).

``--bytecodes`` counts instead the Python bytecodes one ``Producer.send(topic, body)`` executes
in this process (``bench.bytecodes.count``, median of 5 after a warm-up: deterministic, so
it can be taken on a busy machine), and the functions that execute most of them; with
``--base`` the same with another worktree's libs first on ``PYTHONPATH`` (a child process),
and new/base (DEC-sdk-send-path).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bytecodes import count, tree_path
from bench.instructions import requests_of
from bench.raw_client import RawConnection
from bench.scratch import scratch_dir
from bench.stack_cpu import process_cpu
from clepsydra_client import AdminClient, Producer
from tools.parts import store_service

TOPIC = "bench"
BODY = "x" * 16
REPO = Path(__file__).resolve().parents[1]
TOP = 8
"""Functions listed by ``--bytecodes``."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytecodes", action="store_true",
                        help="count the bytecodes of one send instead")
    parser.add_argument("--base", type=Path, help="with --bytecodes: a worktree to count too")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bytecodes:
        return bytecodes(args.base, args.json)
    store = store_service(scratch_dir("clepsydra-round-trip-"), env=_store_env()).start(60)
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


def _store_env() -> dict[str, str]:
    return {"CLEPSYDRA_SINGLE_PROCESS": "true", "CLEPSYDRA_LOG_LEVEL": "WARNING",
            "CLEPSYDRA_OTEL_EXPORTER": "none"}


def count_send() -> dict[str, Any]:
    """{"total": bytecodes of one send (median of 5), "top": [[function, bytecodes], ...]}."""
    store = store_service(scratch_dir("clepsydra-bytecodes-"), env=_store_env()).start(60)
    try:
        AdminClient(store.url).create_topic(TOPIC, 4)
        with Producer(store.url) as producer:
            for _ in range(100):  # warm up: the route kept, a stock of trace contexts drawn
                producer.send(TOPIC, BODY)
            totals = []
            by_function: collections.Counter[str] = collections.Counter()
            for _ in range(5):
                totals.append(count(lambda: producer.send(TOPIC, BODY), by_function))
    finally:
        store.stop(30)
    return {"total": int(statistics.median(totals)),
            "top": [[name, n // 5] for name, n in by_function.most_common(TOP)]}


def bytecodes(base: Path | None, as_json: bool) -> int:
    new = count_send()
    if as_json:
        print(json.dumps(new))
        return 0
    old = None
    if base is not None:
        done = subprocess.run(
            [sys.executable, "-m", "bench.sdk_round_trip", "--bytecodes", "--json"],
            env=dict(os.environ, PYTHONPATH=tree_path(base.resolve())), cwd=REPO,
            capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"counting with {base} failed:\n{done.stderr}")
        old = json.loads(done.stdout.strip().splitlines()[-1])
    for label, counted in (("base", old), ("new", new)):
        if counted is None:
            continue
        print(f"{label}: {counted['total']:,} bytecodes a Producer.send; most in "
              + ", ".join(f"{name} {n}" for name, n in counted["top"]))
    if old is not None:
        print(f"new/base {new['total'] / old['total']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
