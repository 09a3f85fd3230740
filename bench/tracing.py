"""What tracing costs (issue 19.6): the SDK's single-message produce rate and a push consumer's
drain rate, with tracing off and on, in one run.

    .venv/bin/python bench/tracing.py [--seconds 5] [--rounds 3] [--drain 3000]

Modes (the client in this process, the store as its own process):

  off    no tracing: the application installed OpenTelemetry's no-op provider; the store
         without an exporter (its cheapest setting)
  none   the SDK's default, CLEPSYDRA_OTEL_EXPORTER=none: spans made (trace ids in messages)
         but not exported; target: within 1 % of ``off``
  otlp   CLEPSYDRA_OTEL_EXPORTER=otlp at the default sampler (parent-based, always on), client
         and store exporting OTLP/HTTP (batch processor) to a collector stand-in that answers
         200 and drops the spans; target: within 5 % of ``off``
  otlp1  the same with OTEL_TRACES_SAMPLER=parentbased_traceidratio, ratio 0.01 (one trace in
         a hundred, what the prod overlay sets)

Rounds interleave the modes (off, none, otlp, off, ...) so drift on a shared machine hits each
alike; the best round of each mode is printed (FACTS.md: +-40 % between runs, compare ratios
of one run). Beside the rates, the CPU each message cost (this process, exporter thread
included, plus the store's worker): on a shared machine the steadier measure of the cost.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry import trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_produce import StoreProcess, free_port, process_cpu_s

from clepsydra_client.admin import AdminClient
from clepsydra_client.listener import ConsumeFromWhere
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_client.push import PushConsumer
from clepsydra_core import telemetry

MODES = ("off", "none", "otlp", "otlp1")
RATIO = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
BODY = "x" * 100
SINK = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def use_client_tracing(mode: str) -> None:
    """Install this process's tracer provider for ``mode`` (replacing the previous one)."""
    old = trace.get_tracer_provider()
    if hasattr(old, "shutdown"):
        old.shutdown()
    telemetry.reset_after_fork()
    for name, value in RATIO.items():
        if mode == "otlp1":
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    if mode == "off":
        trace.set_tracer_provider(trace.NoOpTracerProvider())
    else:
        telemetry.init_tracing(telemetry.CLIENT_SERVICE, "otlp" if mode == "otlp1" else mode)


class Cpu:
    """CPU seconds of this process and of the store's worker between two points."""

    def __init__(self, store: StoreProcess) -> None:
        self.pid = store.worker_pid() or store.proc.pid
        self.start = time.process_time() + (process_cpu_s(self.pid) or 0.0)

    def us_per(self, count: int) -> float:
        used = time.process_time() + (process_cpu_s(self.pid) or 0.0) - self.start
        return used * 1e6 / max(count, 1)


def produce_rate(store: StoreProcess, topic: str, seconds: float) -> tuple[float, float]:
    """Single-message sends from one thread: (msgs/s, CPU us per message)."""
    with Producer(store.url) as producer:
        for _ in range(50):
            producer.send(topic, BODY)  # warm up: connection, code paths
        n, t0, cpu = 0, time.perf_counter(), Cpu(store)
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            producer.send(topic, BODY)
            n += 1
        rate = n / (time.perf_counter() - t0)
        provider = trace.get_tracer_provider()
        if hasattr(provider, "force_flush"):
            provider.force_flush()  # the export of these spans is part of their cost
        return rate, cpu.us_per(n)


def drain_rate(store: StoreProcess, admin: AdminClient, topic: str,
               count: int) -> tuple[float, float]:
    """``count`` messages produced first, then one push consumer drains them: (msgs/s from
    its first message to its last, CPU us per message)."""
    store_url = store.url
    admin.create_topic(topic, 4)
    with Producer(store_url) as producer:
        producer.send_batch(topic, [OutgoingMessage(BODY) for _ in range(count)])
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
    provider = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush()
    return (count - 1) / (seen[-1] - seen[0]), cpu.us_per(count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain", type=int, default=3000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-tracing-"))
    sink_port = free_port()
    sink = subprocess.Popen([sys.executable, "-c", SINK, str(sink_port)])
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink_port}"
    stores: dict[str, StoreProcess] = {}
    try:
        for name in ("none", "otlp", "otlp1"):
            os.environ["CLEPSYDRA_OTEL_EXPORTER"] = "none" if name == "none" else "otlp"
            if name == "otlp1":
                os.environ.update(RATIO)
            stores[name] = StoreProcess(home / name, "async")
        for name in RATIO:
            os.environ.pop(name, None)
        produce: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
        drain: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
        for round_ in range(args.rounds):
            for mode in MODES:
                store = stores["none" if mode == "off" else mode]
                use_client_tracing(mode)
                admin = AdminClient(store.url)
                topic = f"bench-{mode}-{round_}"
                admin.create_topic(topic, 4)
                produce[mode].append(produce_rate(store, topic, args.seconds))
                drain[mode].append(drain_rate(store, admin, f"drain-{mode}-{round_}",
                                              args.drain))
                admin.close()
                (p, p_us), (d, d_us) = produce[mode][-1], drain[mode][-1]
                print(f"round {round_ + 1} {mode:5} produce {p:7.0f} msgs/s {p_us:6.0f} us/msg"
                      f"  drain {d:7.0f} msgs/s {d_us:5.0f} us/msg", flush=True)
        use_client_tracing("off")
        print(f"\nbest of {args.rounds} rounds; cost against off (rate lost, CPU added)")
        print(f"{'mode':6} {'produce/s':>10} {'cost':>6} {'us/msg':>7} {'cost':>6}"
              f" {'drain/s':>9} {'cost':>6} {'us/msg':>7} {'cost':>6}")
        base = [max(r for r, _ in produce["off"]), min(u for _, u in produce["off"]),
                max(r for r, _ in drain["off"]), min(u for _, u in drain["off"])]
        for mode in MODES:
            best = [max(r for r, _ in produce[mode]), min(u for _, u in produce[mode]),
                    max(r for r, _ in drain[mode]), min(u for _, u in drain[mode])]
            cells = []
            for i, (value, ref) in enumerate(zip(best, base, strict=True)):
                cost = (1 - value / ref) if i % 2 == 0 else (value / ref - 1)
                cells.append(f"{value:{10 if i == 0 else 7 if i % 2 else 9}.0f} "
                             f"{100 * cost:5.1f}%")
            print(f"{mode:6} " + " ".join(cells))
    finally:
        for store in stores.values():
            store.stop()
        sink.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
