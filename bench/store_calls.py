"""What each kind of call costs the store (the store's CPU per operation, so that the
store-side work is planned from figures): µs of the store process's CPU per call, by operation,
one kind at a time from one keep-alive client.

    .venv/bin/python -m bench.store_calls [--calls 2000] [--only produce,pull1,...]
                                          [--set VAR=VALUE ...]

The store alone (``python -m clepsydra_store`` as ``make run`` runs it: one process,
``CLEPSYDRA_SINGLE_PROCESS``) on a free port under a temporary CLEPSYDRA_HOME; each operation
is called ``--calls`` times after a warm-up, and the store's CPU (``/proc``: user + system, all
threads) over those calls is divided by their number. The calls are the ones the whole stack
makes of the store while a producer sends and a consumer consumes (``bench.peers`` counts them
by operation):

  produce        a single message (256-byte body), as ``Producer.send`` sends it
  produce_timer  the same with ``delayMs`` (a timer)
  batch100       a batch of 100 messages, per call (divide by 100 for a message)
  pull1          a pull answered with one message (a consumer keeping up with a slow queue)
  pull32         a pull answered with 32 messages (the SDK's page)
  pull1000       a pull of 1,000 without bodies (the exporter's page)
  pull_empty     a pull at the queue's end, not held (``waitMs`` 0)
  timers1, timers10
                 the scheduler's timer hand-over taking 1 / 10 due timers a call
  entries        a level's entries read (the scheduler's level loop, also when idle)
  list_topics    ``GET /v1/topics`` (the exporter, once a cycle)
  commit         a consumer group's offset commit
  heartbeat      a consumer's heartbeat
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from collections.abc import Callable

from bench.scratch import scratch_dir
from bench.stack_cpu import process_cpu
from tools.parts import store_service

TOPIC = "calls"
BODY = "x" * 256
OPERATIONS = ("produce", "produce_timer", "batch100", "pull1", "pull32", "pull1000",
              "pull_empty", "timers1", "timers10", "entries", "list_topics", "commit",
              "heartbeat")


class Client:
    """One keep-alive connection; ``call`` checks the status."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(self, method: str, path: str, body: object | None = None,
             ok: tuple[int, ...] = (200, 201)) -> dict:  # type: ignore[type-arg]
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        self.conn.request(method, path, body=payload, headers=headers)
        answer = self.conn.getresponse()
        data = answer.read()
        if answer.status not in ok:
            raise RuntimeError(f"{method} {path} -> {answer.status} {data[:300]!r}")
        return json.loads(data) if data else {}


def measure(pid: int, calls: int, one: Callable[[int], None], warmup: int = 50) -> float:
    """µs of the store's CPU per call of ``one(i)``."""
    for i in range(warmup):
        one(i)
    before = process_cpu(pid)
    for i in range(warmup, warmup + calls):
        one(i)
    after = process_cpu(pid)
    assert before is not None and after is not None
    return 1e6 * (sum(after) - sum(before)) / calls


def run(url: str, pid: int, calls: int, only: list[str]) -> list[tuple[str, float, str]]:
    c = Client(url)
    c.call("POST", "/v1/topics", {"name": TOPIC, "queues": 1})
    messages = f"/v1/topics/{TOPIC}/messages"
    pull = f"/v1/topics/{TOPIC}/queues/0/messages"
    rows: list[tuple[str, float, str]] = []
    warm = 50

    def fill(n: int, **fields: object) -> None:
        for start in range(0, n, 100):
            c.call("POST", messages + "/batch", {"messages": [
                {"body": BODY, "tags": "t", **fields} for _ in range(min(100, n - start))]})

    for op in only:
        total = calls + warm
        note = ""
        if op == "produce":
            us = measure(pid, calls, lambda i: c.call("POST", messages, {
                "body": BODY, "tags": "t", "properties": {"UNIQ_KEY": f"u{i}"}}))
        elif op == "produce_timer":
            us = measure(pid, calls, lambda i: c.call("POST", messages, {
                "body": BODY, "tags": "t", "delayMs": 3_600_000}))
        elif op == "batch100":
            us = measure(pid, calls // 10, lambda i: fill(100))
            note = f"{us / 100:.1f} µs a message"
        elif op in ("pull1", "pull32", "pull1000"):
            size = int(op[4:])
            start = c.call("GET", f"/v1/topics/{TOPIC}")["queues"][0]["maxOffset"]
            fill(total * size)
            body = "&body=false" if size == 1000 else ""
            us = measure(pid, calls if size < 1000 else calls // 10,
                         lambda i, start=start, size=size, body=body: c.call(
                             "GET", f"{pull}?offset={start + i * size}&max={size}{body}"))
            note = f"{us / size:.1f} µs a message"
        elif op == "pull_empty":
            end = c.call("GET", f"/v1/topics/{TOPIC}")["queues"][0]["maxOffset"]
            us = measure(pid, calls,
                         lambda i, end=end: c.call("GET", f"{pull}?offset={end}&max=32"))
        elif op in ("timers1", "timers10"):
            per = int(op[6:])
            fill(total * per, deliverAt=int(time.time() * 1000) - 1_000)  # all due
            time.sleep(1.0)
            us = measure(pid, calls, lambda i, per=per: c.call(
                "POST", "/v1/schedule/timers/handover", {"max": per, "waitMs": 0}))
            note = f"{us / per:.1f} µs a timer"
        elif op == "entries":
            us = measure(pid, calls, lambda i: c.call(
                "GET", "/v1/schedule/levels/1/entries?offset=0&max=100"))
        elif op == "list_topics":
            us = measure(pid, calls, lambda i: c.call("GET", "/v1/topics"))
        elif op == "commit":
            us = measure(pid, calls, lambda i: c.call(
                "PUT", "/v1/groups/calls-group/offsets",
                {"topic": TOPIC, "queueId": 0, "offset": i}))
        elif op == "heartbeat":
            us = measure(pid, calls, lambda i: c.call(
                "POST", "/v1/groups/calls-group/heartbeat",
                {"clientId": "bench", "subscriptions": {TOPIC: "*"}}))
        else:
            raise SystemExit(f"unknown operation {op!r}")
        rows.append((op, us, note))
        print(f"  {op:<14} {us:>9,.1f} µs of store CPU a call  {note}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--only", default=",".join(OPERATIONS))
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE")
    args = parser.parse_args()
    env = {"CLEPSYDRA_SINGLE_PROCESS": "true", "CLEPSYDRA_LOG_LEVEL": "WARNING",
           "CLEPSYDRA_OTEL_EXPORTER": "none"}
    for item in args.set:
        var, _, value = item.partition("=")
        env[var] = value
    home = scratch_dir("clepsydra-calls-")
    store = store_service(home, env=env).start(60)
    try:
        print(f"store_calls: the store alone, {args.calls:,} calls each (batch100 and pull1000: "
              f"a tenth), load average {os.getloadavg()[0]:.2f}", flush=True)
        run(store.url, store.pid, args.calls, args.only.split(","))
        print(f"load average after {os.getloadavg()[0]:.2f}")
    finally:
        store.stop(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
