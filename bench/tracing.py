"""What tracing costs (SPEC O1, DEC-hand-made-spans): the SDK's produce rate (single messages
and batches) and a push consumer's drain rate, with tracing off and on, in one run.

    .venv/bin/python -m bench.tracing [--seconds 5] [--rounds 3] [--drain 3000] [--batch 100]

Modes (the client in this process, the store as its own process):

  off      no tracing: the application installed OpenTelemetry's no-op provider; the store
           without an exporter (its cheapest setting)
  none     no exporter set (CLEPSYDRA_OTEL_EXPORTER=none, the default): context-only spans,
           trace ids in messages; target: within 1 % of ``off``
  default  CLEPSYDRA_OTEL_EXPORTER=otlp at the default sampler (parent-based, one new trace in
           a hundred: clepsydra_core.runtime.telemetry.DEFAULT_RATIO), client and store exporting
           OTLP/HTTP (batch span processor) to a local receiver that decodes and counts the
           spans; target: within 5 % of ``off``
  always   the same with OTEL_TRACES_SAMPLER=parentbased_always_on: every message traced

Rounds interleave the modes (off, none, default, always, off, ...) so drift on a shared machine
hits each alike; the best round of each mode is printed (rates vary by tens of % between runs
on a shared machine: compare the ratios of one run). Beside the rates, the CPU each message
cost (this process, exporter thread included, plus the store's worker): on a shared machine the
steadier measure of the cost. The receiver's span count shows that the exporting modes did
export.

A second table measures the tracing work alone (bench/tracing_work.py: the SDK's produce and
consume code with the HTTP round trip replaced by the store's request tracing, in this process)
and sets what each mode adds against the whole CPU of an ``off`` message: a share of 1 % is
within the end-to-end rates' noise, not within this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

from opentelemetry import trace

from bench.scratch import scratch_dir
from bench.store_produce import StoreProcess, process_cpu_s
from bench.tracing_work import measure
from clepsydra_client.admin import AdminClient
from clepsydra_client.consumer.listener import ConsumeFromWhere
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core.runtime import telemetry
from tools.processes import free_port

MODES = ("off", "none", "default", "always")
EXPORTER = {"off": "none", "none": "none", "default": "otlp", "always": "otlp"}
SAMPLER = {"always": "parentbased_always_on"}
"""OTEL_TRACES_SAMPLER per mode (unset: the default sampler)."""
BODY = "x" * 100
RECEIVER = """
import http.server, json, sys, threading
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
count = {}
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        for r in request.resource_spans:
            mode = next((a.value.string_value for a in r.resource.attributes
                         if a.key == "bench.mode"), "?")
            with lock:
                count[mode] = count.get(mode, 0) + sum(len(s.spans) for s in r.scope_spans)
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        body = json.dumps(count).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def set_sampler(mode: str) -> None:
    """OTEL_TRACES_SAMPLER for ``mode``, and the resource attribute the receiver counts by."""
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = f"bench.mode={mode}"
    if mode in SAMPLER:
        os.environ[telemetry.SAMPLER_VAR] = SAMPLER[mode]
    else:
        os.environ.pop(telemetry.SAMPLER_VAR, None)
    os.environ.pop(telemetry.SAMPLER_ARG_VAR, None)


def use_client_tracing(mode: str) -> None:
    """Install this process's tracer provider for ``mode`` (replacing the previous one)."""
    old = trace.get_tracer_provider()
    if hasattr(old, "shutdown"):
        old.shutdown()
    telemetry.reset_after_fork()
    set_sampler(mode)
    if mode == "off":
        trace.set_tracer_provider(trace.NoOpTracerProvider())
    else:
        telemetry.init_tracing(telemetry.CLIENT_SERVICE, EXPORTER[mode])


def flush() -> None:
    """The export of the spans made so far is part of their cost."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush()


class Cpu:
    """CPU seconds of this process and of the store's worker between two points."""

    def __init__(self, store: StoreProcess) -> None:
        self.pid = store.worker_pid() or store.proc.pid
        self.start = time.process_time() + (process_cpu_s(self.pid) or 0.0)

    def us_per(self, count: int) -> float:
        used = time.process_time() + (process_cpu_s(self.pid) or 0.0) - self.start
        return used * 1e6 / max(count, 1)


def produce_rate(store: StoreProcess, topic: str, seconds: float,
                 batch: int) -> tuple[float, float]:
    """Sends from one thread for ``seconds``: single messages (``batch`` 1) or batches of
    ``batch`` (SDK send_batch): (msgs/s, CPU us per message)."""
    with Producer(store.url) as producer:
        send: Callable[[], None]
        if batch == 1:
            def send() -> None:
                producer.send(topic, BODY)
        else:
            chunk = [OutgoingMessage(BODY) for _ in range(batch)]

            def send() -> None:
                producer.send_batch(topic, chunk)
        for _ in range(max(50 // batch, 3)):
            send()  # warm up: connection, code paths
        n, t0, cpu = 0, time.perf_counter(), Cpu(store)
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            send()
            n += batch
        rate = n / (time.perf_counter() - t0)
        flush()
        return rate, cpu.us_per(n)


def drain_rate(store: StoreProcess, admin: AdminClient, topic: str,
               count: int) -> tuple[float, float]:
    """``count`` messages produced first, then one push consumer drains them: (msgs/s from
    its first message to its last, CPU us per message)."""
    store_url = store.url
    admin.create_topic(topic, 4)
    with Producer(store_url) as producer:
        producer.send_batch(topic, [OutgoingMessage(BODY) for _ in range(count)])
    flush()
    lock = threading.Lock()
    seen: list[float] = []
    done = threading.Event()

    def listener(messages: list[object], context: object) -> None:
        with lock:
            seen.extend(time.perf_counter() for _ in messages)
            if len(seen) >= count:
                done.set()

    consumer = PushConsumer(f"G-{topic}", store_url, None,
                            consume_from_where=ConsumeFromWhere.FIRST, pull_batch_size=64,
                            persist_interval_s=1.0).subscribe(topic)
    consumer.register_concurrent(listener)  # type: ignore[arg-type]
    cpu = Cpu(store)
    consumer.start()
    try:
        if not done.wait(300):
            raise RuntimeError(f"drained {len(seen)} of {count}")
    finally:
        consumer.shutdown()
    flush()
    return (count - 1) / (seen[-1] - seen[0]), cpu.us_per(count)


def received(port: int) -> dict[str, int]:
    """Spans the receiver got, by the exporting process's ``bench.mode``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
        got: dict[str, int] = json.loads(answer.read())
        return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=100, help="messages per batch produce")
    parser.add_argument("--work", type=int, default=5000,
                        help="messages per repeat of the in-process tracing work")
    args = parser.parse_args()
    home = scratch_dir("clepsydra-bench-tracing-")
    receiver_port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(receiver_port)])
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver_port}"
    stores: dict[str, StoreProcess] = {}
    kinds = ("single", "batch", "drain")
    results: dict[str, dict[str, list[tuple[float, float]]]] = {
        m: {k: [] for k in kinds} for m in MODES}
    try:
        for mode in MODES[1:]:
            os.environ["CLEPSYDRA_OTEL_EXPORTER"] = EXPORTER[mode]
            set_sampler(mode)
            stores[mode] = StoreProcess(home / mode, "async")
        set_sampler("off")
        for round_ in range(args.rounds):
            for mode in MODES:
                store = stores["none" if mode == "off" else mode]
                use_client_tracing(mode)
                admin = AdminClient(store.url)
                topic = f"bench-{mode}-{round_}"
                admin.create_topic(topic, 4)
                got = results[mode]
                got["single"].append(produce_rate(store, topic, args.seconds, 1))
                got["batch"].append(produce_rate(store, topic, args.seconds, args.batch))
                got["drain"].append(drain_rate(store, admin, f"drain-{mode}-{round_}",
                                               args.drain))
                admin.close()
                print(f"round {round_ + 1} {mode:7} " + "  ".join(
                    f"{kind} {got[kind][-1][0]:7.0f}/s {got[kind][-1][1]:5.0f} us"
                    for kind in kinds), flush=True)
        work: dict[str, dict[str, float]] = {}
        for mode in MODES:
            use_client_tracing(mode)
            work[mode] = measure(args.work, EXPORTER[mode])
        use_client_tracing("off")
        for store in stores.values():
            store.stop()  # its batch span processor exports what it holds
        report(results, received(receiver_port), args)
        report_work(work, results)
    finally:
        for store in stores.values():
            store.stop()
        receiver.terminate()
    return 0


def report(results: dict[str, dict[str, list[tuple[float, float]]]],
           exported: dict[str, int], args: argparse.Namespace) -> None:
    print(f"\nbest of {args.rounds} rounds (msgs/s, CPU us per message); in brackets the cost "
          "against off: rate lost, CPU added")
    head = {"single": "produce 1", "batch": f"produce {args.batch}", "drain": "drain"}
    print(f"{'mode':8}" + "".join(f"{head[k]:>30}" for k in head) + f"{'spans exported':>16}")

    def best(mode: str, kind: str) -> tuple[float, float]:
        rows = results[mode][kind]
        return max(r for r, _ in rows), min(u for _, u in rows)

    for mode in MODES:
        cells = []
        for kind in head:
            (rate, us), (base_rate, base_us) = best(mode, kind), best("off", kind)
            cells.append(f"{rate:8.0f} ({100 * (1 - rate / base_rate):+5.1f}%)"
                         f" {us:5.0f} ({100 * (us / base_us - 1):+5.1f}%)")
        print(f"{mode:8}" + "".join(f"{c:>30}" for c in cells)
              + f"{exported.get(mode, 0):>16}")


def report_work(work: dict[str, dict[str, float]],
                results: dict[str, dict[str, list[tuple[float, float]]]]) -> None:
    """The tracing work alone (tracing_work.py): CPU us per message, and what a mode adds to
    it against ``off`` as a share of off's whole CPU per message (end to end, best round)."""
    print("\ntracing work alone, in process (client + the store's request span; least CPU us "
          "per message of 5 repeats); in brackets the added work as a share of off's whole "
          "message")
    print(f"{'mode':8}" + "".join(f"{k:>22}" for k in ("produce 1", "produce batch", "drain")))
    for mode in MODES:
        cells = []
        for kind in ("single", "batch", "drain"):
            whole = min(u for _, u in results["off"][kind])
            added = work[mode][kind] - work["off"][kind]
            cells.append(f"{work[mode][kind]:8.1f} ({100 * added / whole:+5.1f}%)")
        print(f"{mode:8}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    sys.exit(main())
