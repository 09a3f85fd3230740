"""Timer messages benchmark (SPEC T1, DEC-timer-slot-files): exact delivery times through the
store's timer index and the scheduler's ``deliver_timers`` task.

    .venv/bin/python -m bench.timers [--pending N] [--drain N] [--cancel N] [--quick]
                                     [--skip lateness,drain,engine]

Real processes on free ports under a temporary CLEPSYDRA_HOME (redis-server, the store, the
scheduler's worker and beat), as bench/delay_delivery.py runs them. Phases:

  lateness  N timers, 1 KiB, deliverAt = send time + uniform(2 s, 12 s) (the peers' workload,
            no rounding to levels), HTTP batches of 100 from 2 threads, the scheduler running:
            lateness = storeTimestamp of the delivered copy - its DELIVER_TS (p50/p99/max),
            goal p99 <= 10 ms, T1 bound 100 ms; never early (count of negative lateness).
  drain     N timers all due at one instant (produced first, the scheduler running): drain
            rate from the due time to the last delivered copy.
  engine    N timers due at once handed over by the store engine alone, in this process: CPU
            per message (best and median of 3), the writer's cost without HTTP.
  memory    N timers an hour ahead: RSS of the store's worker process and of the scheduler's
            worker at rest and with them pending (target: within 10 %).
  cancel    K of those cancelled by msgId over HTTP from 2 threads: cancels/s.

``--behind N`` parks N timers two hours ahead first, so every phase runs with them pending.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.delay_delivery import (
    BATCH,
    BODY,
    ENGINE_CALL,
    DeliveryStack,
    Report,
    engine_handover_cpu,
    lateness_line,
    mb,
    proc_status,
)

TOPIC = "bench"


def _now() -> int:
    return time.time_ns() // 1_000_000


def _store_worker_pid(master: int) -> int:
    """The store's gunicorn worker (the one process that holds the engine)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == master:
            return int(stat.parent.name)
    return master


def _produce(stack: DeliveryStack, n: int, at_of, threads: int = 2) -> tuple[float, list[str]]:  # type: ignore[no-untyped-def]
    """Send n timers (``at_of(i)`` -> deliverAt, called at send time); (seconds, msgIds)."""
    url = f"{stack.store.url}/v1/topics/{TOPIC}/messages/batch"
    starts = iter(range(0, n, BATCH))
    lock = threading.Lock()
    ids: list[str] = []

    def send() -> None:
        while True:
            with lock:
                start = next(starts, None)
            if start is None:
                return
            msgs = [{"body": BODY, "deliverAt": at_of(i)}
                    for i in range(start, min(start + BATCH, n))]
            resp = stack.http.session.post(url, data=json.dumps({"messages": msgs}),
                                           headers={"content-type": "application/json"},
                                           timeout=120)
            resp.raise_for_status()
            with lock:
                ids.extend(r["msgId"] for r in resp.json()["results"])

    started = time.perf_counter()
    workers = [threading.Thread(target=send) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - started, ids


def _delivered(stack: DeliveryStack) -> list[tuple[int, int]]:
    """(DELIVER_TS, storeTimestamp) of every delivered copy."""
    info = stack.http.session.get(f"{stack.store.url}/v1/topics/{TOPIC}", timeout=30).json()
    out: list[tuple[int, int]] = []
    for queue in info["queues"]:
        offset = queue["minOffset"]
        while offset < queue["maxOffset"]:
            page = stack.http.session.get(
                f"{stack.store.url}/v1/topics/{TOPIC}/queues/{queue['queueId']}/messages",
                params={"offset": offset, "max": 1000, "body": "false"}, timeout=60).json()
            out += [(int(m["properties"]["DELIVER_TS"]), m["storeTimestamp"])
                    for m in page["messages"]]
            if not page["messages"]:
                break
            offset = page["nextOffset"]
    return out


def _wait_count(stack: DeliveryStack, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while stack.http.count(TOPIC) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {stack.http.count(TOPIC)} of {n} delivered in {timeout_s} s")
        time.sleep(0.2)


def phase_lateness(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== lateness: {n:,} timers x 1 KiB, deliverAt = send + uniform(2 s, 12 s)")
    rng = random.Random(15)
    seconds, _ = _produce(stack, n, lambda i: _now() + rng.randint(2_000, 12_000))
    report.add(f"produce                      {n / seconds:10,.0f} msgs/s ({seconds:.1f} s)")
    _wait_count(stack, n, 120 + seconds)
    time.sleep(1.0)  # a late duplicate would show up here
    copies = _delivered(stack)
    report.add(f"copies delivered             {len(copies):10,d} (of {n:,} timers)")
    report.add(lateness_line("lateness (store timestamps)",
                             [stored - due for due, stored in copies]))


def phase_drain_now(stack: DeliveryStack, n: int, report: Report) -> None:
    report.add(f"\n== drain: {n:,} timers due at one instant")
    base = stack.http.count(TOPIC)
    due = _now() + 5_000 + n // 5  # after production ends (>= 5k msgs/s)
    seconds, _ = _produce(stack, n, lambda i: due)
    if _now() >= due:
        report.add("  (production outlasted the due time: drain measured from the due time)")
    report.add(f"produce                      {n / seconds:10,.0f} msgs/s ({seconds:.1f} s)")
    _wait_count(stack, base + n, 300)
    stored = sorted(s for d, s in _delivered(stack) if d == due)
    span_ms = max(stored[-1] - due, 1)
    report.add(f"drain                        {len(stored) / span_ms * 1000:10,.0f} msgs/s "
               f"(due {due}, last copy +{span_ms} ms)")


def phase_engine(n: int, report: Report) -> None:
    report.add(f"\n== engine: {n:,} timers due at once, handed over in-process "
               f"{ENGINE_CALL:,} a call")
    best, median = engine_handover_cpu("timer", n)
    report.add(f"store engine CPU per message  best {best:5.2f} us, median {median:5.2f} us")


def phase_memory_and_cancel(stack: DeliveryStack, n: int, cancels: int, report: Report) -> None:
    report.add(f"\n== memory: {n:,} timers an hour ahead; cancel {cancels:,} by msgId")
    store_pid = _store_worker_pid(stack.store.pid)
    worker_pid = stack.procs[0].pid
    time.sleep(2.0)
    rest = (proc_status(store_pid, "VmRSS"), proc_status(worker_pid, "VmRSS"))
    rest_anon = proc_status(store_pid, "RssAnon")
    seconds, ids = _produce(stack, n, lambda i: _now() + 3_600_000 + i % 1_000_000)
    time.sleep(3.0)  # a few empty hand-over waits
    pending = (proc_status(store_pid, "VmRSS"), proc_status(worker_pid, "VmRSS"))
    pending_anon = proc_status(store_pid, "RssAnon")
    report.add(f"produce                      {n / seconds:10,.0f} msgs/s ({seconds:.1f} s)")
    report.add(f"store worker RSS             at rest {mb(rest[0])}, {n:,} pending "
               f"{mb(pending[0])} ({(pending[0] / rest[0] - 1) * 100:+.1f} %)")
    report.add(f"  of which anonymous          at rest {mb(rest_anon)}, pending {mb(pending_anon)} "
               f"({(pending_anon / max(rest_anon, 1) - 1) * 100:+.1f} %; the rest is file-backed: "
               "code and libraries)")
    report.add(f"scheduler worker RSS         at rest {mb(rest[1])}, {n:,} pending "
               f"{mb(pending[1])} ({(pending[1] / max(rest[1], 1) - 1) * 100:+.1f} %)")
    backlog = stack.http.session.get(f"{stack.store.url}/v1/schedule/timers", timeout=120)
    report.add(f"GET /v1/schedule/timers      pending {backlog.json()['pending']:,} "
               f"({backlog.elapsed.total_seconds() * 1000:.0f} ms)")
    todo = iter(ids[:cancels])
    lock = threading.Lock()
    failures: list[int] = []

    def cancel() -> None:
        while True:
            with lock:
                msg_id = next(todo, None)
            if msg_id is None:
                return
            resp = stack.http.session.delete(f"{stack.store.url}/v1/messages/{msg_id}",
                                             timeout=60)
            if resp.status_code != 200:
                failures.append(resp.status_code)

    started = time.perf_counter()
    threads = [threading.Thread(target=cancel) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    report.add(f"cancel by msgId              {cancels / took:10,.0f} cancels/s "
               f"({len(failures)} failed)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=100_000)
    parser.add_argument("--cancel", type=int, default=5_000)
    parser.add_argument("--behind", type=int, default=0,
                        help="timers parked two hours ahead before the phases run, so lateness "
                             "and drain are measured with that many pending (target: 1 M)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="", help="phases to leave out: lateness,drain,engine")
    args = parser.parse_args()
    if args.quick:
        args.pending, args.drain, args.cancel = 10_000, 10_000, 1_000
    report = Report()
    with tempfile.TemporaryDirectory(prefix="clepsydra-bench-timers-") as tmp:
        stack = DeliveryStack(Path(tmp))
        try:
            stack.http.create_topic(TOPIC, 4)
            stack.start("worker")
            stack.start("beat")
            skip = set(args.skip.split(","))
            if args.behind:
                seconds, _ = _produce(stack, args.behind,
                                      lambda i: _now() + 7_200_000 + i % 60_000)
                report.add(f"\n== {args.behind:,} timers parked two hours ahead "
                           f"({args.behind / seconds:,.0f} msgs/s): the phases below run "
                           "beside them")
            if "lateness" not in skip:
                phase_lateness(stack, args.pending, report)
            if "drain" not in skip:
                phase_drain_now(stack, args.drain, report)
            if "engine" not in skip:
                phase_engine(args.drain, report)
            phase_memory_and_cancel(stack, args.pending, args.cancel, report)
        finally:
            stack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
