"""What a pending delayed message costs the store: disk bytes and resident memory per
pending message at 1M and 10M pending, and the store's restart time with them pending.

    .venv/bin/python -m bench.pending_cost [--counts 1000000,10000000] [--kinds timers,levels]
                                           [--body 16] [--max-produce-s 900]

For each kind, one store (``python -m clepsydra_store`` as ``make run`` runs it: one process,
``CLEPSYDRA_SINGLE_PROCESS``; async flush) under a fresh CLEPSYDRA_HOME on a free port:

  timers  ``deliverAt`` spread over the next two hours (7,200 distinct seconds, the timer
          index's one-second slots), the 100 messages of a batch due in the same second, the
          batches going round the 7,200 seconds;
  levels  ``delayLevel`` 18 (2 h in the default table).

Messages are sent in batches of 100 from two raw keep-alive clients (bodies of ``--body``
bytes). At each count of ``--counts`` the bench prints the store's folder size on disk (``du``:
blocks, not apparent sizes) and the store process's RSS (and its anonymous part) minus what they
were before the first message, per pending message; then the store is stopped (SIGTERM) and
started again: the time until it answers ``/healthz`` and a produce, and its RSS after the
restart with them pending. A count that production would not reach within ``--max-produce-s``
is measured where production stopped, and the output says so.

The anchor: Pulsar's delayed-delivery index keeps ~24 bytes of memory per pending message (its
in-memory priority queue of ledger id, entry id and time); the store keeps its index on disk
(the timer index's slot files and timer log, the schedule topic's ConsumeQueue).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from bench.raw_client import RawConnection
from bench.scratch import scratch_dir
from bench.threads import run_threads
from tools.parts import store_service
from tools.processes import HttpService

TOPIC = "pending"
BATCH = 100
SPREAD_S = 7_200
LEVEL = 18
ANCHOR = "Pulsar's in-memory delayed-delivery index: ~24 bytes of memory a pending message"


def status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[0])


def payloads(kind: str, body: str, base_ms: int) -> list[bytes]:
    """Batch bodies to cycle through: for timers one a second of the 7,200 (its 100 messages
    due in that second); ``spread``: 72 batches, each of 100 distinct seconds."""
    if kind == "levels":
        return [json.dumps({"messages": [{"body": body, "delayLevel": LEVEL}] * BATCH}).encode()]
    if kind == "spread":
        return [json.dumps({"messages": [
            {"body": body, "deliverAt": base_ms + 1000 * (b * BATCH + i)}
            for i in range(BATCH)]}).encode() for b in range(SPREAD_S // BATCH)]
    return [json.dumps({"messages": [{"body": body, "deliverAt": base_ms + 1000 * second}]
                        * BATCH}).encode() for second in range(SPREAD_S)]


def produce(url: str, bodies: list[bytes], n: int, deadline: float, threads: int = 2) -> int:
    """Send ``n`` messages (batches cycling through ``bodies``) unless ``deadline`` (monotonic)
    passes first; the number sent."""
    lock = threading.Lock()
    sent = [0]

    def loop(index: int) -> None:
        mine = bodies[index::threads] or bodies
        conn = RawConnection(url, f"/v1/topics/{TOPIC}/messages/batch", mine[0])
        head = conn.request[:len(conn.request) - len(mine[0])].split(b"Content-Length:")[0]
        requests_ = [head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                     for body in mine]
        k = 0
        try:
            while time.monotonic() < deadline:
                with lock:
                    if sent[0] >= n:
                        return
                    sent[0] += BATCH
                conn.request = requests_[k % len(requests_)]  # one connection, batch after batch
                conn.send()
                k += 1
        finally:
            conn.close()

    run_threads(loop, threads)
    return min(sent[0], n)


def start_store(home: Path, port: int | None = None) -> tuple[HttpService, float]:
    service = store_service(home, port=port, env={"CLEPSYDRA_SINGLE_PROCESS": "true",
                                                  "CLEPSYDRA_LOG_LEVEL": "WARNING",
                                                  "CLEPSYDRA_OTEL_EXPORTER": "none"})
    t0 = time.perf_counter()
    service.start(timeout_s=1800)
    return service, time.perf_counter() - t0


def run_kind(kind: str, counts: list[int], args: argparse.Namespace, root: Path) -> None:
    home = root / kind
    service, _ = start_store(home)
    try:
        measure_kind(service, home, kind, counts, args)
    finally:
        service.stop(120)


def measure_kind(service: HttpService, home: Path, kind: str, counts: list[int],
                 args: argparse.Namespace) -> None:
    requests.post(f"{service.url}/v1/topics", json={"name": TOPIC, "queues": 4},
                  timeout=30).raise_for_status()
    time.sleep(2.0)
    data = home / "store"
    rss0, anon0, disk0 = (status_kib(service.pid, "VmRSS"), status_kib(service.pid, "RssAnon"),
                          du_bytes(data))
    print(f"\n== {kind}: store at rest RSS {rss0 / 1024:.1f} MiB (anonymous {anon0 / 1024:.1f}), "
          f"folder {disk0 / 2**20:.1f} MiB", flush=True)
    bodies = payloads(kind, "x" * args.body, int(time.time() * 1000) + 3_600_000)
    deadline = time.monotonic() + args.max_produce_s
    pending = 0
    t0 = time.perf_counter()
    for count in counts:
        pending += produce(service.url, bodies, count - pending, deadline)
        took = time.perf_counter() - t0
        if not pending:
            raise SystemExit("nothing was produced")
        short = "" if pending >= count else f" (production stopped at {pending:,}: " \
                                            f"--max-produce-s {args.max_produce_s:g})"
        time.sleep(3.0)  # the flush and the index writes settle
        rss, anon, disk = (status_kib(service.pid, "VmRSS"), status_kib(service.pid, "RssAnon"),
                           du_bytes(data))
        print(f"  {pending:>11,} pending{short}: produced at {pending / took:,.0f} msgs/s; "
              f"disk {(disk - disk0) / pending:,.1f} bytes a message "
              f"({disk / 2**30:.2f} GiB); store RSS {rss / 1024:.1f} MiB = "
              f"{(rss - rss0) * 1024 / pending:,.2f} bytes a message over rest "
              f"(anonymous {anon / 1024:.1f} MiB, {(anon - anon0) * 1024 / pending:,.2f} "
              f"bytes a message)", flush=True)
        if pending < count:
            break
    if args.no_restart:
        return
    port = int(service.url.rsplit(":", 1)[1])
    t_stop = time.perf_counter()
    service.stop(120)
    stop_s = time.perf_counter() - t_stop
    again, ready_s = start_store(home, port)
    try:
        t1 = time.perf_counter()
        requests.post(f"{again.url}/v1/topics/{TOPIC}/messages", json={"body": "after"},
                      timeout=600).raise_for_status()
        first_produce_s = ready_s + time.perf_counter() - t1
        time.sleep(2.0)
        rss, anon = status_kib(again.pid, "VmRSS"), status_kib(again.pid, "RssAnon")
    finally:
        again.stop(120)
    print(f"  restart with {pending:,} pending: stop {stop_s:.1f} s; start to /healthz "
          f"{ready_s:.1f} s, to the first produce answered {first_produce_s:.1f} s; RSS after "
          f"{rss / 1024:.1f} MiB (anonymous {anon / 1024:.1f}; "
          f"{(rss - rss0) * 1024 / pending:,.2f} bytes a message over rest)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000000,10000000")
    parser.add_argument("--kinds", default="timers,levels",
                        help="timers, levels, and spread: timers whose batches each hold 100 "
                             "distinct seconds (the timer index then writes 100 slot files a "
                             "batch)")
    parser.add_argument("--body", type=int, default=16)
    parser.add_argument("--max-produce-s", type=float, default=900.0)
    parser.add_argument("--no-restart", action="store_true", help="skip the restart")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))
    root = scratch_dir("clepsydra-pending-")
    print(f"pending_cost under {root}; anchor: {ANCHOR}", flush=True)
    try:
        for kind in args.kinds.split(","):
            run_kind(kind, counts, args, root)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
