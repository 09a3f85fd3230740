"""Store produce benchmark: prints msgs/s and MB/s for 1 KiB messages.

    .venv/bin/python -m bench.store_produce [--seconds 5] [--only inproc,single1,...]
                                            [--profile] [--url http://127.0.0.1:8081]

Scenarios (targets on a 2-core machine; later ones in brackets):
  inproc   in-process MessageStore.put_batch of 100, async flush       >= 150,000 msgs/s
  single1  HTTP single sends, 1 client thread                          (no target)
  single8  HTTP single sends, 8 client threads                         >= 2,500 msgs/s
  batch    HTTP batches of 100, 2 client threads                       >= 50,000 msgs/s
                                                                       (later: >= 100,000)
  batchraw the same with raw-socket clients (cheaper than requests: shows the server)
  sync8    HTTP batches of 100, 8 client threads, CLEPSYDRA_FLUSH=sync  >= 20,000 msgs/s
  sdk1     the SDK's Producer.send, one message per request, 1 thread   (later: >= 5,000)
  single1raw  HTTP single sends, 1 raw-socket client (the server's side)  (later: >= 5,000)
  sdk8     the SDK's Producer.send from 8 threads, one Producer         (later: >= 10,000)
  single8raw  HTTP single sends, 8 raw-socket clients                  (later: >= 10,000)
  single4raw  HTTP single sends, 4 raw-socket clients: the poller's group of single sends
           appended as one (DEC-poller-group-append)
  lat1k    Producer.send paced at 1,000 msgs/s: latency p50/p99/max     (later: p99 <= 2 ms)
  sdkasync the SDK's Producer.send_async (automatic batching), 1 thread (later: >= 80,000);
           every future kept, as an application that reads its results does

It starts its own store processes (``python -m clepsydra_store``) on free ports with a temporary
CLEPSYDRA_HOME, unless ``--url`` names a running one. Clients use one ``requests.Session`` per
thread (keep-alive) and send pre-encoded JSON, so the figures are the server's. ``--profile``
samples the store's worker with py-spy during ``single8`` and ``batch`` and prints where its time
goes. The client threads share the machine with the server: on 2 cores they take most of one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench.raw_client import RawConnection
from tools.parts import store_service

REPO = Path(__file__).resolve().parents[1]

BODY_BYTES = 1024
BATCH = 100
TARGETS = {"inproc": 150_000, "single8": 2_500, "batch": 50_000, "sync8": 20_000}
PACED_RATE = 1_000
"""Messages a second ``lat1k`` offers."""
LATENCY_TARGET_MS = 2.0
TOPIC = "bench"


@dataclass
class Row:
    name: str
    messages: int
    seconds: float
    server_us: float | None = None
    client_us: float | None = None
    note: str = ""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def mb_s(self) -> float:
        return self.rate * BODY_BYTES / 1e6


class StoreProcess:
    """``python -m clepsydra_store`` on a free port under its own CLEPSYDRA_HOME (the
    stack builder's :func:`tools.parts.store_service`), and its one worker's pid."""

    def __init__(self, home: Path, flush: str) -> None:
        self.service = store_service(home, env={"CLEPSYDRA_FLUSH": flush,
                                                "CLEPSYDRA_LOG_LEVEL": "WARNING"}).start(60)
        self.url = self.service.url

    def worker_pid(self) -> int | None:
        pid = self.service.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return None
        pids = children.split()
        return int(pids[0]) if pids else None

    def stop(self) -> None:
        self.service.stop(30)


def message(i: int) -> dict[str, object]:
    text = f"{i:08d}" + "x" * (BODY_BYTES - 8)
    return {"body": text, "tags": "bench", "keys": f"k{i}"}


def run_clients(threads: int, seconds: float,
                send: Callable[[requests.Session], int]) -> tuple[int, float]:
    """Run ``send`` in a loop on each thread for ``seconds``; (messages, elapsed)."""
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def loop(index: int) -> None:
        with requests.Session() as session:
            send(session)  # connect and warm up
            start.wait()
            n = 0
            try:
                while time.monotonic() < stop_at[0]:
                    n += send(session)
            except BaseException as exc:  # reported below
                errors.append(exc)
            counts[index] = n

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    stop_at[0] = time.monotonic() + seconds + 3600  # set properly once all are connected
    start.wait()
    t0 = time.monotonic()
    stop_at[0] = t0 + seconds
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise errors[0]
    return sum(counts), elapsed


def http_single(url: str, threads: int, seconds: float) -> tuple[int, float]:
    payload = json.dumps(message(0)).encode()
    target = f"{url}/v1/topics/{TOPIC}/messages"
    headers = {"Content-Type": "application/json"}

    def send(session: requests.Session) -> int:
        resp = session.post(target, data=payload, headers=headers)
        if resp.status_code != 201:
            raise RuntimeError(f"{resp.status_code} {resp.text[:200]}")
        return 1

    return run_clients(threads, seconds, send)


def raw_single(url: str, threads: int, seconds: float) -> tuple[int, float]:
    payload = json.dumps(message(0)).encode()
    path = f"/v1/topics/{TOPIC}/messages"
    local = threading.local()

    def send(session: requests.Session) -> int:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = RawConnection(url, path, payload)
        conn.send()
        return 1

    return run_clients(threads, seconds, send)


def raw_batch(url: str, threads: int, seconds: float) -> tuple[int, float]:
    payload = json.dumps({"messages": [message(i) for i in range(BATCH)]}).encode()
    path = f"/v1/topics/{TOPIC}/messages/batch"
    local = threading.local()

    def send(session: requests.Session) -> int:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = RawConnection(url, path, payload)
        conn.send()
        return BATCH

    return run_clients(threads, seconds, send)


def http_batch(url: str, threads: int, seconds: float) -> tuple[int, float]:
    payload = json.dumps({"messages": [message(i) for i in range(BATCH)]}).encode()
    target = f"{url}/v1/topics/{TOPIC}/messages/batch"
    headers = {"Content-Type": "application/json"}

    def send(session: requests.Session) -> int:
        resp = session.post(target, data=payload, headers=headers)
        if resp.status_code != 201:
            raise RuntimeError(f"{resp.status_code} {resp.text[:200]}")
        return BATCH

    return run_clients(threads, seconds, send)


def sdk_send(url: str, seconds: float, *, batched: bool, threads: int = 1) -> tuple[int, float]:
    """The SDK as an application uses it, from this process: ``Producer.send`` per message
    (from ``threads`` threads sharing one Producer), or ``send_async`` and ``flush()`` (every
    future's outcome counted)."""
    from clepsydra_client import Producer

    text = message(0)["body"]
    with Producer(url) as producer:
        producer.send(TOPIC, str(text), tags="bench")  # connect
        if not batched:
            return _sdk_threads(producer, str(text), threads, seconds)
        n = 0
        t0 = time.monotonic()
        stop_at = t0 + seconds
        futures = []
        while time.monotonic() < stop_at:
            for _ in range(1000):
                futures.append(producer.send_async(TOPIC, str(text), tags="bench",
                                                   keys=[f"k{n}"]))
                n += 1
        producer.flush()
        elapsed = time.monotonic() - t0
        failed = sum(1 for f in futures if f.exception() is not None)
        if failed:
            raise RuntimeError(f"{failed} of {n} async sends failed: {futures[0].exception()}")
        return n, elapsed


def _sdk_threads(producer: Any, text: str, threads: int, seconds: float) -> tuple[int, float]:
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def loop(index: int) -> None:
        producer.send(TOPIC, text, tags="bench")  # this thread's connection
        start.wait()
        n = 0
        try:
            while time.monotonic() < stop_at[0]:
                producer.send(TOPIC, text, tags="bench", keys=[f"k{index}-{n}"])
                n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
        counts[index] = n

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    stop_at[0] = time.monotonic() + seconds + 3600
    start.wait()
    t0 = time.monotonic()
    stop_at[0] = t0 + seconds
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return sum(counts), time.monotonic() - t0


def paced_latency(url: str, seconds: float, rate: float = PACED_RATE) -> tuple[int, float, str]:
    """``Producer.send`` offered ``rate`` messages a second (open loop: each send is due at
    its slot; a late one's latency counts from its slot, so a stall is not hidden); (messages,
    seconds, "p50/p99/max ms")."""
    from clepsydra_client import Producer

    text = str(message(0)["body"])
    latencies: list[float] = []
    with Producer(url) as producer:
        producer.send(TOPIC, text, tags="bench")
        t0 = time.monotonic()
        total = int(seconds * rate)
        for i in range(total):
            due = t0 + i / rate
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            producer.send(TOPIC, text, tags="bench", keys=[f"p{i}"])
            latencies.append(time.monotonic() - due)
        elapsed = time.monotonic() - t0
    latencies.sort()
    p50, p99 = (latencies[int(q * (len(latencies) - 1))] * 1000 for q in (0.50, 0.99))
    return total, elapsed, f"p50 {p50:.2f} / p99 {p99:.2f} / max {latencies[-1] * 1000:.2f} ms"


def in_process(home: Path, seconds: float) -> tuple[int, float]:
    from clepsydra_store.engine.config import EngineConfig
    from clepsydra_store.engine.message_store import MessageStore
    from clepsydra_store.engine.types import PutRequest

    store = MessageStore(EngineConfig(data_dir=home / "inproc", flush="async"))
    try:
        store.create_topic(TOPIC, 4)
        body = b"x" * BODY_BYTES
        batch = [PutRequest(topic=TOPIC, body=body, tags="bench", keys=f"k{i}")
                 for i in range(BATCH)]
        store.put_batch(batch)
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(20):
                store.put_batch(batch)
            n += 20 * BATCH
        return n, time.monotonic() - t0
    finally:
        store.close()


# ---- profile -----------------------------------------------------------------------------

CATEGORIES = (  # first match from the leaf upwards names the frame's category
    ("engine (MessageStore)", ("clepsydra_store/engine/",)),
    ("records / properties encode", ("clepsydra_core/records.py", "clepsydra_core/properties.py")),
    ("OpenTelemetry spans", ("opentelemetry/",)),
    ("prometheus metrics", ("prometheus_client/",)),
    ("JSON + validation (produce.py)", ("clepsydra_store/api/", "clepsydra_core/validation.py",
                                       "orjson", "base64")),
    ("Flask / Werkzeug", ("flask/", "werkzeug/")),
    ("gunicorn HTTP parse / write", ("gunicorn/http/",)),
    ("gunicorn gthread loop, sockets, futures", ("gunicorn/", "selectors.py", "socket.py",
                                                 "concurrent/futures", "queue.py")),
    ("threading / idle", ("threading.py",)),
)


def start_profile(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(spy, os.X_OK):
        print("py-spy not found (pip install py-spy); no profile", file=sys.stderr)
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--gil",
                             "--full-filenames", "--rate", "250",
                             "--duration", str(int(seconds)), "--nonblocking", "--output",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summarize_profile(path: Path) -> list[tuple[str, float]]:
    """Share of busy (non-idle) samples by category, from py-spy's collapsed stacks."""
    totals: Counter[str] = Counter()
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        leaf = frames[-1]
        if any(idle in leaf for idle in ("wait (threading.py", "select (selectors.py",
                                         "poll (selectors.py", "_worker (concurrent",
                                         "get (queue.py", "acquire", "sleep")):
            continue
        category = "other"
        for frame in reversed(frames):
            match = next((name for name, markers in CATEGORIES
                          if any(m in frame for m in markers)), None)
            if match:
                category = match
                break
        totals[category] += int(count)
    busy = sum(totals.values()) or 1
    return [(name, 100.0 * n / busy) for name, n in totals.most_common()]


# ---- main --------------------------------------------------------------------------------

def measured(store: StoreProcess | None, name: str,
             run: Callable[[], tuple[Any, ...]]) -> Row:
    """Run a scenario (it returns messages, seconds and maybe a note); with a store we
    started, also the CPU its worker process used."""
    pid = store.worker_pid() if store else None
    before = process_cpu_s(pid) if pid else None
    own_before = time.process_time()
    result = run()
    own = time.process_time() - own_before
    messages, seconds = result[0], result[1]
    row = Row(name, messages, seconds, note=str(result[2]) if len(result) > 2 else "")
    if messages:
        row.client_us = own * 1e6 / messages
    if pid and before is not None:
        after = process_cpu_s(pid)
        if after is not None and messages:
            row.server_us = (after - before) * 1e6 / messages
    return row


def process_cpu_s(pid: int) -> float | None:
    """user + system CPU seconds of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--only",
                        default="inproc,single1,single1raw,sdk1,single8,single8raw,sdk8,lat1k,"
                                "batch,batchraw,sync8,sdkasync")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--url", help="use a running store (async flush) instead of starting one")
    args = parser.parse_args()
    only = set(args.only.split(","))
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-"))
    rows: list[Row] = []
    profiles: dict[str, list[tuple[str, float]]] = {}
    try:
        if "inproc" in only:
            rows.append(Row("in-process put_batch(100), async flush",
                            *in_process(home, args.seconds)))
        if only & {"single1", "single1raw", "single4raw", "single8", "single8raw", "batch",
                    "batchraw", "sdk1", "sdk8", "lat1k", "sdkasync"}:
            store = None if args.url else StoreProcess(home / "async", "async")
            url = args.url or (store.url if store else "")
            try:
                requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 4}, timeout=10)
                scenarios: list[tuple[str, str, Callable[[], tuple[Any, ...]]]] = [
                    ("single1", "HTTP single, 1 requests client",
                     lambda: http_single(url, 1, args.seconds)),
                    ("single1raw", "HTTP single, 1 raw-socket client",
                     lambda: raw_single(url, 1, args.seconds)),
                    ("single4raw", "HTTP single, 4 raw-socket clients",
                     lambda: raw_single(url, 4, args.seconds)),
                    ("single8", "HTTP single, 8 requests clients",
                     lambda: http_single(url, 8, args.seconds)),
                    ("single8raw", "HTTP single, 8 raw-socket clients",
                     lambda: raw_single(url, 8, args.seconds)),
                    ("batch", "HTTP batch 100, 2 clients",
                     lambda: http_batch(url, 2, args.seconds)),
                    ("batchraw", "HTTP batch 100, 2 raw-socket clients",
                     lambda: raw_batch(url, 2, args.seconds)),
                    ("sdk1", "SDK Producer.send, 1 thread",
                     lambda: sdk_send(url, args.seconds, batched=False)),
                    ("sdk8", "SDK Producer.send, 8 threads",
                     lambda: sdk_send(url, args.seconds, batched=False, threads=8)),
                    ("lat1k", f"SDK Producer.send paced {PACED_RATE:,}/s",
                     lambda: paced_latency(url, args.seconds)),
                    ("sdkasync", "SDK Producer.send_async, 1 thread",
                     lambda: sdk_send(url, args.seconds, batched=True)),
                ]
                for key, label, run in scenarios:
                    if key not in only:
                        continue
                    spy = None
                    out = home / f"{key}.prof"
                    if args.profile and store is not None and key in ("single8raw", "batch"):
                        pid = store.worker_pid()
                        spy = start_profile(pid, out, args.seconds) if pid else None
                    rows.append(measured(store, label, run))
                    if spy is not None:
                        spy.wait(60)
                        profiles[label] = summarize_profile(out)
            finally:
                if store is not None:
                    store.stop()
        if "sync8" in only:
            store = StoreProcess(home / "sync", "sync")
            try:
                requests.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 4},
                              timeout=10)
                rows.append(measured(store, "HTTP batch 100, 8 clients, sync flush",
                                     lambda: http_batch(store.url, 8, args.seconds)))
            finally:
                store.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print_table(rows)
    for label, shares in profiles.items():
        print(f"\nwhere the store worker's CPU goes: {label} (py-spy --gil samples)")
        for name, pct in shares:
            print(f"  {pct:5.1f} %  {name}")
    return 0


def print_table(rows: list[Row]) -> None:
    targets = {"in-process": TARGETS["inproc"], "HTTP single, 8 requests": TARGETS["single8"],
               "HTTP single, 1 raw": 5_000, "SDK Producer.send, 1": 5_000,
               "HTTP single, 8 raw": 10_000, "SDK Producer.send, 8": 10_000,
               "HTTP batch 100, 2": TARGETS["batch"], "HTTP batch 100, 8": TARGETS["sync8"],
               "SDK Producer.send_async": 80_000}
    print(f"\n{'scenario (1 KiB bodies)':<40} {'messages':>9} {'s':>5} {'msgs/s':>9} "
          f"{'MB/s':>6} {'server':>8} {'client':>8} {'target':>8}")
    print(f"{'':<40} {'':>9} {'':>5} {'':>9} {'':>6} {'us/msg':>8} {'us/msg':>8}")
    print("-" * 101)
    for row in rows:
        target = next((t for prefix, t in targets.items() if row.name.startswith(prefix)), None)
        mark = "" if target is None else (" ok" if row.rate >= target else " BELOW")
        tgt = f"{target:,}" if target else "-"
        cpu = f"{row.server_us:,.1f}" if row.server_us else "-"
        own = f"{row.client_us:,.1f}" if row.client_us else "-"
        print(f"{row.name:<40} {row.messages:>9,} {row.seconds:>5.1f} {row.rate:>9,.0f} "
              f"{row.mb_s:>6.1f} {cpu:>8} {own:>8} {tgt:>8}{mark}")
        if row.note:
            print(f"  {row.note}")
    print("server us/msg: CPU time of the store's worker process per message (user + system);"
          "\n1e6 / us/msg is what one store process could take if the clients cost nothing."
          "\nclient us/msg: CPU time of this process (the clients, the SDK) per message."
          f"\nlatency target: p99 <= {LATENCY_TARGET_MS:g} ms at "
          f"{PACED_RATE:,} msgs/s offered.")


if __name__ == "__main__":
    sys.exit(main())
