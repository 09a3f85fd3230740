"""Retry service benchmark: send-backs per second through the API, and DLQ resend throughput.

    .venv/bin/python -m bench.send_back [--quick] [--seconds 5] [--only single,batch,resend]
                                        [--resend-count 100000] [--workers 2] [--profile]

Scenarios (targets on a 2-core machine):
  single   POST /v1/groups/{g}/send-back, one message a request, 8 client threads   (no target)
  batch    POST /v1/groups/{g}/send-back/batch, 100 a request with pull hints
           (topic, queueId, queueOffset: one store pull reads a batch's headers),
           4 client threads                                                      >= 3,000/s
  batchraw the same without hints (one store GET per message's headers)         (no target)
  resend   POST /v1/groups/{g}/dlq/resend {all: true} of 100,000 dead letters      >= 20,000/s

It starts its own redis-server, store (``python -m clepsydra_store``) and retry service
(``python -m clepsydra_retry``, ``--workers`` gunicorn workers) on free ports with a temporary
CLEPSYDRA_HOME. Messages to send back are produced up front with the store's batch produce;
dead letters for ``resend`` are made the R10 way (a batch of plain sends to ``%RETRY%<g>`` at
the max reconsume count, which the store stores in ``%DLQ%<g>``), so set-up stays short.
Each send-back reads the message's headers from the store and writes one copy there, so the
store's request rate bounds the figure. ``--profile`` samples the retry worker and the store
worker with py-spy during ``batch`` and ``resend`` and prints where their time goes.
The clients share the 2 cores with the services: figures are noisy (+-40 % between runs seen here).
"""

from __future__ import annotations

import argparse
import itertools
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
from urllib.parse import quote

import requests

from tools import parts
from tools.processes import RedisServer

REPO = Path(__file__).resolve().parents[1]

TARGETS = {"batch": 3_000, "resend": 20_000}
Stored = tuple[int, int, int]
"""(commitLogOffset, queueId, queueOffset) of a produced message."""
BATCH = 100
PRODUCE_BATCH = 1000
BODY = "x" * 256
LEVELS_1S = " ".join(["1s"] * 18)
SOURCE_TOPIC = "bench-in"


@dataclass
class Row:
    name: str
    count: int
    seconds: float
    errors: int = 0
    cpu_s: dict[str, float] | None = None
    """CPU seconds each service used during the scenario (from /proc)."""

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


class Services:
    """redis-server, store and retry service (the one stack builder, tools/parts.py) under a
    temporary home."""

    def __init__(self, home: Path, workers: int) -> None:
        env = {"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S, "CLEPSYDRA_LOG_LEVEL": "WARNING"}
        self.parts = (parts.Stack(home, env=env).with_redis().with_store()
                      .with_retry(CLEPSYDRA_RETRY_WORKERS=str(workers),
                                  CLEPSYDRA_RETRY_THREADS="8").start())
        assert self.parts.redis is not None
        self.redis: RedisServer = self.parts.redis
        self.store, self.retry = self.parts.store, self.parts.retry

    def stop(self) -> None:
        self.parts.stop()

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each service (all its processes)."""
        return {name: cpu_seconds([p.pid, *child_pids(p.pid)])
                for name, p in (("retry", self.retry), ("store", self.store),
                                ("redis", self.redis))}


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def measured(svc: Services, run: Callable[[], Row]) -> Row:
    before = svc.cpu()
    row = run()
    after = svc.cpu()
    row.cpu_s = {k: after[k] - before[k] for k in after}
    return row


def child_pids(pid: int) -> list[int]:
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True,
                             check=False).stdout
    except FileNotFoundError:
        return []
    return [int(p) for p in out.split()]


def produce(session: requests.Session, store_url: str, topic: str, count: int,
            properties: dict[str, str] | None = None) -> list[Stored]:
    """``count`` messages via batch produce; where each was stored."""
    offsets: list[Stored] = []
    url = f"{store_url}/v1/topics/{quote(topic, safe='')}/messages/batch"
    message: dict[str, Any] = {"body": BODY, "tags": "bench"}
    if properties:
        message["properties"] = properties
    for start in range(0, count, PRODUCE_BATCH):
        n = min(PRODUCE_BATCH, count - start)
        resp = session.post(url, json={"messages": [message] * n}, timeout=60)
        resp.raise_for_status()
        offsets += [(r["commitLogOffset"], r["queueId"], r["queueOffset"])
                    for r in resp.json()["results"]]
    return offsets


def run_clients(threads: int, seconds: float,
                work: Callable[[requests.Session, int], tuple[int, int]]) -> Row:
    """Each thread calls ``work(session, call_index)`` -> (ok, errors) until time is up."""
    counts = [0] * threads
    errors = [0] * threads
    stop_at = time.monotonic() + seconds
    calls = itertools.count()

    def loop(index: int) -> None:
        with requests.Session() as session:
            while time.monotonic() < stop_at:
                ok, bad = work(session, next(calls))
                counts[index] += ok
                errors[index] += bad

    started = time.monotonic()
    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return Row("", sum(counts), time.monotonic() - started, sum(errors))


def bench_single(svc: Services, offsets: list[Stored], seconds: float, threads: int) -> Row:
    url = f"{svc.retry.url}/v1/groups/bench-single/send-back"
    requests.put(f"{svc.retry.url}/v1/groups/bench-single", json={}, timeout=10)

    def work(session: requests.Session, i: int) -> tuple[int, int]:
        resp = session.post(url, json={"commitLogOffset": offsets[i % len(offsets)][0],
                                       "reason": "bench", "consumerId": "b"}, timeout=30)
        return (1, 0) if resp.status_code == 200 else (0, 1)

    row = run_clients(threads, seconds, work)
    row.name = f"single send-back, {threads} clients"
    return row


def bench_batch(svc: Services, offsets: list[Stored], seconds: float, threads: int, *,
                hints: bool) -> Row:
    group = "bench-batch" if hints else "bench-batchraw"
    url = f"{svc.retry.url}/v1/groups/{group}/send-back/batch"
    requests.put(f"{svc.retry.url}/v1/groups/{group}", json={}, timeout=10)
    # what a consumer holds after a pull: batches of neighbours from one queue
    by_queue = sorted(offsets, key=lambda o: (o[1], o[2]))
    groups = len(by_queue) // BATCH

    def item(stored: Stored) -> dict[str, Any]:
        out: dict[str, Any] = {"commitLogOffset": stored[0], "reason": "bench",
                               "consumerId": "b"}
        if hints:
            out.update(topic=SOURCE_TOPIC, queueId=stored[1], queueOffset=stored[2])
        return out

    def work(session: requests.Session, i: int) -> tuple[int, int]:
        start = (i % groups) * BATCH
        items = [item(o) for o in by_queue[start:start + BATCH]]
        resp = session.post(url, json={"items": items}, timeout=60)
        if resp.status_code != 200:
            return 0, BATCH
        ok = sum(1 for r in resp.json()["results"] if "outcome" in r)
        return ok, BATCH - ok

    row = run_clients(threads, seconds, work)
    row.name = f"batch send-back x{BATCH}{'' if hints else ' no hints'}, {threads} clients"
    return row


def bench_resend(svc: Services, count: int) -> tuple[Row, Row]:
    """(set-up row, resend row): make ``count`` dead letters, then resend them all."""
    group, origin = "bench-dlq", "bench-origin"
    session = requests.Session()
    session.put(f"{svc.retry.url}/v1/groups/{group}", json={}, timeout=10)
    session.post(f"{svc.store.url}/v1/topics", json={"name": origin, "queues": 4}, timeout=10)
    started = time.monotonic()
    produce(session, svc.store.url, f"%RETRY%{group}", count, properties={
        "RECONSUME_TIME": "16", "MAX_RECONSUME_TIMES": "16", "RETRY_TOPIC": origin,
        "FAILURE_HISTORY": json.dumps([{"time": 1, "consumer": "b", "reason": "bench",
                                        "reconsumeTimes": 15}])})
    setup = Row(f"dead letters made (R10 batch sends of {PRODUCE_BATCH})", count,
                time.monotonic() - started)
    depth = session.get(f"{svc.retry.url}/v1/groups/{group}/dlq", params={"max": 1},
                        timeout=30).json()["maxOffset"]
    assert depth == count, f"DLQ holds {depth}, expected {count}"
    cpu_before = svc.cpu()
    started = time.monotonic()
    resp = session.post(f"{svc.retry.url}/v1/groups/{group}/dlq/resend", json={"all": True},
                        headers={"X-Client-Id": "bench"}, timeout=600)
    elapsed = time.monotonic() - started
    cpu_after = svc.cpu()
    resp.raise_for_status()
    resent = int(resp.json()["resent"])
    left = session.get(f"{svc.retry.url}/v1/groups/{group}/dlq", params={"max": 1},
                       timeout=30).json()["messages"]
    session.close()
    return setup, Row("DLQ resend all -> original topic", resent, elapsed,
                      errors=count - resent + len(left),
                      cpu_s={k: cpu_after[k] - cpu_before[k] for k in cpu_after})


def start_profile(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(spy, os.X_OK):
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return None
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds) + 1),
                             "-f", "raw", "-o", str(out), "-r", "100", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _frame(text: str) -> tuple[str, str]:
    """py-spy raw frame ``func (path/to/file.py:12)`` -> (``func (file.py)``, path)."""
    func, _, where = text.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{func} ({path.rsplit('/', 1)[-1]})", path


INTERESTING = ("clepsydra_", "/json/", "requests/", "urllib3/", "redis/", "opentelemetry/",
               "http/client")


def summarize_profile(paths: list[Path], top: int = 14) -> tuple[list[tuple[str, float]],
                                                                 list[tuple[str, float]]]:
    """(inclusive share of our and the I/O libraries' frames, self share of leaf frames)."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not n.isdigit() or not stack:
                continue
            count = int(n)
            total += count
            frames = [_frame(f) for f in stack.split(";") if " (" in f]
            if frames:
                leaf[frames[-1][0]] += count
            for name in {name for name, p in frames if any(k in p for k in INTERESTING)}:
                inclusive[name] += count
    if not total:
        return [], []
    return ([(f, 100 * c / total) for f, c in inclusive.most_common(top)],
            [(f, 100 * c / total) for f, c in leaf.most_common(top)])


def profiled(svc: Services, name: str, seconds: float, workdir: Path,
             run: Callable[[], Any]) -> Any:
    """Run a scenario with py-spy sampling every worker of the retry service and the store
    (active samples only: idle threads waiting on sockets do not count)."""
    targets = {"retry": child_pids(svc.retry.pid) or [svc.retry.pid],
               "store": child_pids(svc.store.pid) or [svc.store.pid]}
    spies: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
    for service, pids in targets.items():
        for pid in pids:
            out = workdir / f"{name}-{service}-{pid}.txt"
            spy = start_profile(pid, out, seconds)
            if spy:
                spies.append((service, out, spy))
    result = run()
    for _, _, spy in spies:
        spy.wait(timeout=seconds + 30)
    for service in targets:
        files = [out for s, out, _ in spies if s == service]
        inclusive, leaf = summarize_profile(files)
        print(f"\n  {service} during {name}: inclusive % of active samples (our code, I/O libs)")
        for frame, share in inclusive:
            print(f"    {share:5.1f}%  {frame}")
        print(f"  {service} during {name}: self % (leaf frames)")
        for frame, share in leaf[:8]:
            print(f"    {share:5.1f}%  {frame}")
    return result


def print_table(rows: list[Row]) -> None:
    print(f"\n{'scenario':<48} {'count':>8} {'secs':>6} {'per s':>7} {'err':>4} {'target':>8}"
          f"       CPU us/msg retry store redis")
    for row in rows:
        key = "batch" if row.name.startswith("batch") and "no hints" not in row.name else (
            "resend" if row.name.startswith("DLQ resend") else "")
        target = f">={TARGETS[key]:,}" if key else ""
        verdict = ("ok" if row.rate >= TARGETS[key] else "BELOW") if key else ""
        cpu = ""
        if row.cpu_s and row.count:
            cpu = " ".join(f"{1e6 * row.cpu_s[k] / row.count:>5.0f}"
                           for k in ("retry", "store", "redis"))
        print(f"{row.name:<48} {row.count:>8,} {row.seconds:>6.2f} {row.rate:>7,.0f} "
              f"{row.errors:>4} {target:>8} {verdict:<5} {cpu:>24}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run (2 s, 10,000 resends)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--only", default="single,batch,batchraw,resend")
    parser.add_argument("--resend-count", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2, help="retry gunicorn workers")
    parser.add_argument("--threads", type=int, default=8, help="client threads (single)")
    parser.add_argument("--batch-threads", type=int, default=4, help="client threads (batch)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.resend_count = min(args.seconds, 2.0), min(args.resend_count, 10_000)
    only = set(args.only.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="clepsydra-bench-retry-"))
    rows: list[Row] = []
    svc = Services(workdir, args.workers)
    try:
        session = requests.Session()
        session.post(f"{svc.store.url}/v1/topics", json={"name": SOURCE_TOPIC, "queues": 4},
                     timeout=10)
        pool = 20_000 if not args.quick else 4_000
        offsets = produce(session, svc.store.url, SOURCE_TOPIC, pool) \
            if only - {"resend"} else []
        session.close()
        if "single" in only:
            rows.append(measured(svc, lambda: bench_single(svc, offsets, args.seconds,
                                                           args.threads)))
        if "batch" in only:
            def batch() -> Row:
                return measured(svc, lambda: bench_batch(svc, offsets, args.seconds,
                                                         args.batch_threads, hints=True))
            rows.append(profiled(svc, "batch", args.seconds, workdir, batch)
                        if args.profile else batch())
        if "batchraw" in only:
            rows.append(measured(svc, lambda: bench_batch(svc, offsets, args.seconds,
                                                          args.batch_threads, hints=False)))
        if "resend" in only:
            def resend() -> tuple[Row, Row]:
                return bench_resend(svc, args.resend_count)
            rows.extend(profiled(svc, "resend", args.resend_count / 20_000 + 3, workdir, resend)
                        if args.profile else resend())
    finally:
        svc.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
