"""Key index benchmark (DEC-key-index-on-disk: the store's memory must not grow with the
messages it holds).

    python -m bench.key_index [--messages 1000000] [--lookups 2000] [--threads 2]

Starts its own store (``python -m clepsydra_store``, temporary CLEPSYDRA_HOME, free port), sends
N keyed messages in HTTP batches of 1000 (each message has a key of its own, ``KEYS``, and the
``UNIQ_KEY`` the store gives it: two index entries a message), and prints:

- the store worker's resident memory (VmRSS) when started, after a 100,000-message warm-up
  (the "empty" store: code paths and every request thread's buffers warmed), after each tenth
  of the N messages, and after restarts;
- look-up latency p50/p99 by key (``GET /v1/messages?topic=&key=``) and by msgId
  (``GET /v1/messages/{msgId}``) over one keep-alive connection, for random messages;
- restart time (process start to ``/healthz``) after SIGTERM (index closed cleanly) and after
  kill -9 (the active index file's slots rebuilt, the tail after the checkpoint re-dispatched).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

from bench.threads import run_threads
from tools.parts import store_service
from tools.processes import HttpService, free_port

TOPIC = "keyed"
BATCH = 1000
WARMUP = 100_000
BODY = "x" * 64


def worker_rss(service: HttpService) -> int:
    """VmRSS of the store's one gunicorn worker (the master's child), bytes."""
    pid = service.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    status = Path(f"/proc/{children[0]}/status").read_text()
    kb = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(kb) * 1024


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)


def request(conn: http.client.HTTPConnection, method: str, path: str,
            body: bytes | None = None) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def produce(url: str, first: int, count: int, threads: int,
            msg_ids: dict[int, str]) -> float:
    """Send messages ``first .. first+count`` (key ``order-<n>``) in batches; msgs/s. Keeps
    the msgId of every 1000th message in ``msg_ids``."""
    starts = list(range(first, first + count, BATCH))
    lock = threading.Lock()

    def loop(index: int) -> None:
        conn = connect(url)
        try:
            for start in starts[index::threads]:
                n = min(BATCH, first + count - start)
                body = ('{"messages":[' + ",".join(
                    f'{{"body":"{BODY}","keys":"order-{i}"}}'
                    for i in range(start, start + n)) + "]}").encode()
                status, raw = request(conn, "POST", f"/v1/topics/{TOPIC}/messages/batch", body)
                if status != 201:
                    raise RuntimeError(f"produce answered {status}: {raw[:200]!r}")
                results = json.loads(raw)["results"]
                with lock:
                    for k in range(0, n, 1000):
                        msg_ids[start + k] = results[k]["msgId"]
        finally:
            conn.close()

    t0 = time.perf_counter()
    run_threads(loop, threads)
    return count / (time.perf_counter() - t0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def lookups(url: str, total: int, msg_ids: dict[int, str], n: int) -> dict[str, list[float]]:
    """Latencies (ms) of n look-ups by key and n by msgId, each checked to find its message."""
    rng = random.Random(14)
    conn = connect(url)
    out: dict[str, list[float]] = {"key": [], "msgId": []}
    ids = list(msg_ids.items())
    for _ in range(n):
        i = rng.randrange(total)
        t0 = time.perf_counter()
        status, raw = request(conn, "GET", f"/v1/messages?topic={TOPIC}&key=order-{i}")
        out["key"].append((time.perf_counter() - t0) * 1000)
        if status != 200 or len(json.loads(raw)["messages"]) != 1:
            raise RuntimeError(f"key order-{i} not found: {status} {raw[:200]!r}")
        i, msg_id = ids[rng.randrange(len(ids))]
        t0 = time.perf_counter()
        status, raw = request(conn, "GET", f"/v1/messages/{quote(msg_id)}")
        out["msgId"].append((time.perf_counter() - t0) * 1000)
        if status != 200 or json.loads(raw)["messages"][0]["body"] != BODY:
            raise RuntimeError(f"msgId {msg_id} not found: {status} {raw[:200]!r}")
    conn.close()
    return out


def start(home: Path, port: int, name: str) -> tuple[HttpService, float]:
    t0 = time.perf_counter()
    service = store_service(home, port=port, name=name,
                            env={"CLEPSYDRA_LOG_LEVEL": "WARNING"}).start(600)
    return service, time.perf_counter() - t0


def mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-keyindex-"))
    port = free_port()
    rows: list[tuple[str, str]] = []
    service, first_start = start(home, port, "store")
    try:
        conn = connect(service.url)
        status, raw = request(conn, "POST", "/v1/topics",
                              json.dumps({"name": TOPIC, "queues": 4}).encode())
        assert status == 201, raw
        conn.close()
        rows.append(("store started (no message)", mb(worker_rss(service))))
        msg_ids: dict[int, str] = {}
        produce(service.url, 0, WARMUP, args.threads, msg_ids)  # the same request threads
        empty = worker_rss(service)
        rows.append((f"after {WARMUP:,} messages (the 'empty' store)", mb(empty)))
        tenth = args.messages // 10
        curve, seconds = [], 0.0
        for part in range(10):
            t0 = time.perf_counter()
            produce(service.url, WARMUP + part * tenth, tenth, args.threads, msg_ids)
            seconds += time.perf_counter() - t0
            curve.append(worker_rss(service))
        total = WARMUP + 10 * tenth
        full = curve[-1]
        rows.append((f"after {total:,} keyed messages ({10 * tenth / seconds:,.0f} msgs/s in)",
                     f"{mb(full)} ({(full - empty) / empty:+.1%} vs empty)"))
        rows.append(("  RSS after each tenth of them",
                     " ".join(f"{n / 2**20:.1f}" for n in curve) + " MB"))
        lat = lookups(service.url, total, msg_ids, args.lookups)
        for kind in ("key", "msgId"):
            rows.append((f"look-up by {kind}, {args.lookups} random, HTTP keep-alive",
                         f"p50 {percentile(lat[kind], 0.5):.2f} ms, "
                         f"p99 {percentile(lat[kind], 0.99):.2f} ms"))
        rows.append(("RSS after the look-ups", mb(worker_rss(service))))
        service.stop(120)
        service, clean = start(home, port, "store-clean")
        rows.append(("restart after SIGTERM (to /healthz)",
                     f"{clean:.2f} s (first start {first_start:.2f} s)"))
        lookups(service.url, total, msg_ids, 50)
        rows.append(("RSS after that restart and 100 look-ups", mb(worker_rss(service))))
        service.kill()
        service, crashed = start(home, port, "store-killed")
        rows.append(("restart after kill -9 (to /healthz)", f"{crashed:.2f} s"))
        lookups(service.url, total, msg_ids, 50)
        files = [f for f in (home / "store" / "index").rglob("*") if f.is_file()]
        rows.append(("key index on disk", f"{len(files)} files, "
                                          f"{mb(sum(f.stat().st_size for f in files))}"))
    finally:
        service.stop(120)
        shutil.rmtree(home, ignore_errors=True)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
