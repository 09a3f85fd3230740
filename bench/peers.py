"""Clepsydra beside its Python peers on one workload anyone can rerun (docs/performance.md):

    .venv/bin/python -m bench.peers [--messages 10000] [--only clepsydra,zset,dramatiq,celery]
                                    [--no-kill] [--seed N] [--profile DIR]

(`make bench-peers` installs Dramatiq, pinned in requirements/bench.txt, first.) Each system
gets the same work: N messages, each with a delay drawn uniformly from 2-12 s (one seed for all),
sent one at a time from one producer thread; one consumer process records every arrival
(``bench/peers_apps.py``). Every system runs twice:

  clean  nothing fails: enqueue rate (messages/s, one per call), lateness of each first arrival
         (arrival - intended time, ms) p50/p99/max, and early arrivals (before the intended time);
  kill   the consumer process is killed with SIGKILL once half the messages were sent and
         started again one second later: messages never seen after the wait (lost) and seen
         twice (duplicated).

The systems, each on its own fresh Redis (AOF, fsync every second) or stack:

  clepsydra  the whole local stack (``python -m tools.stack``), ``Producer.send`` with
             ``delay=`` (exact times, SPEC T1) or, where the SDK has no exact times, the next
             delay level up (said in the output); a ``PushConsumer``;
  zset       a Redis sorted set scored by due time, popped by a Lua script polled every 1 ms;
  dramatiq   Dramatiq's Redis broker, ``send_with_options(delay=ms)``, one worker, 2 threads;
  celery     Celery's Redis broker, ``apply_async(countdown=s)``, one worker, solo pool.

The wait after the last send ends when every message arrived, or 60 s after the last intended
time (Celery's Redis transport gives a killed worker's unacknowledged tasks back only after its
visibility timeout, one hour; Dramatiq's after its heartbeat timeout, one minute).

While the producer sends (the clean run), the cores' time is read by process (``/proc``:
the producer, the consumer, every process of the stack or the peer's Redis, and the rest of the
machine: what else ran) and, for Clepsydra, the store's requests by operation in that window
and its CPU per message sent (docs/performance.md: where the time goes). ``--profile DIR``
also records every Python process of the run with py-spy during the send
(``bench.stack_cpu.Profiles``) and prints each one's busiest functions.
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import sys
import time
import urllib.request
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.peers_apps import ZSET_KEY, celery_app, dramatiq_actor, now_ms
from bench.scratch import scratch_dir
from bench.stack_cpu import CpuWindow, Profile, Profiles, stack_processes, store_requests
from tests.fixtures.stack import RunningStack, launch_stack, stop_stack, store_worker_pid
from tools.processes import Process, RedisServer, wait_until

SYSTEMS = ("clepsydra", "zset", "dramatiq", "celery")
TOPIC = "peers"
GROUP = "peers-consumer"
LEVEL_DELAYS_MS = (1_000, 5_000, 10_000, 30_000)
"""The local stack's first levels (``1s 5s 10s 30s``), for an SDK without exact times."""
GRACE_MS = 60_000
THREAD_PARTS = ("store", "scheduler worker --beat")
"""Parts whose threads' CPU is printed one by one (named when --profile ran py-spy)."""
STACK_SETTINGS: dict[str, str] = {}
"""``--set VAR=VALUE``: given to the stack's processes (and set in this process, so the
producer and the consumer read it too)."""


@dataclass
class Outcome:
    sent: int
    enqueue_per_s: float
    lateness: list[int]
    early: int
    lost: int
    duplicated: int
    cpu: CpuWindow | None = None
    """The cores' time by process while the producer sent (the clean run)."""
    store_calls: Counter[str] | None = None
    """Clepsydra: the store's requests by operation while the producer sent."""


def percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def read_arrivals(path: Path) -> list[tuple[int, int, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split(",")
        if len(parts) == 3:
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return rows


class Consumer:
    """The consumer process of one run, restartable after a kill."""

    def __init__(self, argv: list[str], log_dir: Path) -> None:
        self.argv = argv
        self.log_dir = log_dir
        self.proc = self._start()

    def _start(self) -> Process:
        return Process("consumer", [sys.executable, "-m", "bench.peers_apps", *self.argv],
                       log_dir=self.log_dir).start()

    def kill_and_restart(self) -> None:
        self.proc.kill()
        time.sleep(1.0)
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.stop()


def run_once(send: Callable[[int, int], None], consumer: Consumer, out: Path,
             delays_ms: list[int], kill: bool, watch: Watch) -> Outcome:
    """Send every message (one call each), kill the consumer half-way if asked, wait for
    the arrivals, and count; the send window's CPU by process (clean runs)."""
    intended: dict[int, int] = {}
    window = None if kill else CpuWindow(watch.stack, {
        "producer (bench)": os.getpid(), "consumer": consumer.proc.pid, **watch.pids},
        thread_parts=THREAD_PARTS)
    calls0 = watch.calls() if watch.calls and not kill else None
    profiles = None
    if watch.profile_dir is not None and not kill:
        python = {"producer (bench)": os.getpid(), "consumer": consumer.proc.pid}
        if watch.stack is not None:
            python |= {name: pid for pid, name in stack_processes(watch.stack).items()
                       if name not in ("redis", "supervisor")}
        expected_s = len(delays_ms) / 3_000 + 2  # the profile covers most of the send
        profiles = Profiles(python, expected_s, watch.profile_dir / watch.name).start()
    if window is not None:
        window.start()
    started = time.perf_counter()
    for i, delay in enumerate(delays_ms):
        due = now_ms() + delay
        intended[i] = due
        send(i, due)
        if kill and i == len(delays_ms) // 2:
            consumer.kill_and_restart()
    seconds = time.perf_counter() - started
    if window is not None:
        window.stop()
    calls = watch.calls() - calls0 if watch.calls and calls0 is not None else None
    if profiles is not None:
        for process, profile in print_profiles(watch.name, profiles).items():
            if window is not None:
                window.thread_names[process] = profile.thread_names
    last_due = max(intended.values())

    def all_arrived() -> bool:
        return {row[0] for row in read_arrivals(out)} >= intended.keys()

    try:
        wait_until(all_arrived, max(1.0, (last_due + GRACE_MS - now_ms()) / 1000),
                   interval_s=0.5, what="every arrival")
    except TimeoutError:
        pass
    consumer.stop()
    rows = read_arrivals(out)
    seen = Counter(row[0] for row in rows)
    first: dict[int, int] = {}
    for ident, due, arrival in rows:
        if ident in intended and ident not in first:
            first[ident] = arrival - intended[ident]
            assert due == intended[ident], "the consumer saw another message's time"
    lateness = list(first.values())
    return Outcome(len(delays_ms), len(delays_ms) / seconds, lateness,
                   sum(1 for v in lateness if v < 0),
                   sum(1 for i in intended if i not in seen),
                   sum(1 for count in seen.values() if count > 1), window, calls)


def print_profiles(name: str, profiles: Profiles) -> dict[str, Profile]:
    """Each process's busiest functions (self and, of the project's, inclusive)."""
    found = profiles.wait()
    for process, profile in found.items():
        if not profile.samples:
            continue
        print(f"  py-spy {name} / {process}: {profile.samples:,} samples, "
              f"{100 * profile.busy / profile.samples:.0f} % not waiting; busiest (self):",
              flush=True)
        for function, pct in profile.top(10):
            print(f"      {pct:5.1f} %  {function}")
        print("    the project's functions, inclusive:")
        for function, pct in profile.top(14, inclusive=True, only=("clepsydra_",)):
            print(f"      {pct:5.1f} %  {function}")
    return found


@dataclass
class Watch:
    """What a run measures besides the arrivals."""

    name: str
    stack: RunningStack | None = None
    pids: dict[str, int] = field(default_factory=dict)
    """The peer's own server processes (its Redis) by name."""
    calls: Callable[[], Counter[str]] | None = None
    profile_dir: Path | None = None


# ---- one function per system: start it, return (send, consumer argv, stop, note, watch) ------

Setup = tuple[Callable[[int, int], None], list[str], Callable[[], None], str, Watch]


def clepsydra(work: Path, out: Path) -> Setup:
    from clepsydra_client import AdminClient, Producer

    stack = launch_stack(work / "home", "--quiet", CLEPSYDRA_OTEL_EXPORTER="none",
                         **STACK_SETTINGS)
    AdminClient(stack.store_url, stack.retry_url).create_topic(TOPIC, 4)
    producer = Producer(stack.store_url)
    exact = "delay" in inspect.signature(producer.send).parameters
    note = "exact times (delay=)" if exact else "rounded up to the next delay level"

    def send(i: int, due: int) -> None:
        delay = due - now_ms()
        if exact:
            producer.send(TOPIC, f"{i}:{due}", delay=max(0, delay))
            return
        level = next((n for n, ms in enumerate(LEVEL_DELAYS_MS, 1) if ms >= delay),
                     len(LEVEL_DELAYS_MS))
        producer.send(TOPIC, f"{i}:{due}", delay_level=level)

    def stop() -> None:
        producer.close()
        print(store_figures(stack), flush=True)
        stop_stack(stack)

    return (send, ["clepsydra", stack.store_url, str(out), TOPIC, GROUP], stop, note,
            Watch("clepsydra", stack, calls=lambda: store_requests(stack.store_url)))


def store_figures(stack: RunningStack) -> str:
    """The store's pulls (by answer: with messages or empty) and its worker's CPU seconds
    since it started (what the consumer's pulls cost the store: DEC-pull-hold)."""
    raw = urllib.request.urlopen(stack.store_url + "/metrics", timeout=10).read().decode()
    pulls = sum(float(line.rsplit(" ", 1)[1]) for line in raw.splitlines()
                if line.startswith('clepsydra_store_requests_total{operation="pull"'))
    produced = sum(float(line.rsplit(" ", 1)[1]) for line in raw.splitlines()
                   if line.startswith("clepsydra_store_produced_messages_total"))
    stat = Path(f"/proc/{store_worker_pid(stack)}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return (f"clepsydra store: {pulls:,.0f} pulls, {produced:,.0f} produced, worker CPU "
            f"{cpu_s:.1f} s ({1e6 * cpu_s / max(produced, 1):,.0f} us a produced message)")


def zset(work: Path, out: Path) -> Setup:
    server = RedisServer(work / "redis", appendonly=True).start()
    r = redis.Redis.from_url(server.url)

    def send(i: int, due: int) -> None:
        r.zadd(ZSET_KEY, {f"{i}:{due}": due})

    return (send, ["zset", server.url, str(out)], server.stop, "ZADD / Lua pop",
            Watch("zset", pids={"redis": server.pid}))


def dramatiq(work: Path, out: Path) -> Setup:
    server = RedisServer(work / "redis", appendonly=True).start()
    actor = dramatiq_actor(server.url, None)

    def send(i: int, due: int) -> None:
        actor.send_with_options(args=(i, due), delay=max(0, due - now_ms()))

    return (send, ["dramatiq", server.url, str(out)], server.stop, "send_with_options(delay=)",
            Watch("dramatiq", pids={"redis": server.pid}))


def celery(work: Path, out: Path) -> Setup:
    server = RedisServer(work / "redis", appendonly=True).start()
    with warnings.catch_warnings():  # the second run's app registers the same task name
        warnings.simplefilter("ignore")
        app = celery_app(server.url, str(work / "unused"))
    task = app.tasks["peers.arrive"]
    producer = app.producer_pool.acquire(block=True)

    def send(i: int, due: int) -> None:
        task.apply_async(args=(i, due), countdown=max(0, due - now_ms()) / 1000,
                         producer=producer)

    def stop() -> None:
        producer.release()
        server.stop()

    return (send, ["celery", server.url, str(out)], stop, "apply_async(countdown=)",
            Watch("celery", pids={"redis": server.pid}))


SETUPS: dict[str, Callable[[Path, Path], Setup]] = {
    "clepsydra": clepsydra, "zset": zset, "dramatiq": dramatiq, "celery": celery}


def run_system(name: str, delays_ms: list[int], kill: bool, root: Path,
               profile_dir: Path | None = None) -> tuple[Outcome, str]:
    work = root / f"{name}-{'kill' if kill else 'clean'}"
    work.mkdir(parents=True)
    out = work / "arrivals.csv"
    send, argv, stop, note, watch = SETUPS[name](work, out)
    watch.profile_dir = profile_dir
    consumer = None
    try:
        consumer = Consumer(argv, work)
        time.sleep(3.0)  # the consumer connects and subscribes
        return run_once(send, consumer, out, delays_ms, kill, watch), note
    finally:
        if consumer is not None:
            consumer.stop()  # stopped already after a run; here also after a failure
        stop()


def print_cpu(name: str, clean: Outcome) -> None:
    """The send window's CPU by process, and (Clepsydra) the store's calls in it."""
    if clean.cpu is None:
        return
    print(f"  {name}: the cores' time while the producer sent {clean.sent:,} messages",
          flush=True)
    print(clean.cpu.table(("msg", clean.sent)), flush=True)
    if clean.store_calls:
        calls = ", ".join(f"{op} {n:,}" for op, n in clean.store_calls.most_common() if n)
        print(f"  store requests in that window: {calls}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--only", default=",".join(SYSTEMS))
    parser.add_argument("--no-kill", action="store_true", help="skip the kill runs")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy every Python process of the clean runs while sending; "
                             "raw profiles under DIR")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE",
                        help="a setting for every process of the run (the stack, the producer "
                             "and the consumer), e.g. CLEPSYDRA_CLIENT_SPIN_US=0; repeatable")
    args = parser.parse_args()
    for item in args.set:
        var, _, value = item.partition("=")
        STACK_SETTINGS[var] = os.environ[var] = value
    rng = random.Random(args.seed)
    delays_ms = [rng.randint(2_000, 12_000) for _ in range(args.messages)]
    root = scratch_dir("clepsydra-peers-")
    print(f"peers: {args.messages:,} messages, delays uniform in 2-12 s (seed {args.seed}), "
          f"one producer, one consumer; work under {root}"
          + (f"; settings {' '.join(args.set)}" if args.set else ""), flush=True)
    header = (f"{'system':<10} {'how':<34} {'enqueue/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'max ms':>7} {'early':>5} | {'kill: lost':>10} {'dup':>6}")
    rows: list[str] = []
    for name in args.only.split(","):
        clean, note = run_system(name, delays_ms, False, root, args.profile)
        print_cpu(name, clean)
        killed = None if args.no_kill else run_system(name, delays_ms, True, root)[0]
        row = (f"{name:<10} {note:<34} {clean.enqueue_per_s:>9,.0f} "
               f"{percentile(clean.lateness, 0.5):>7,} {percentile(clean.lateness, 0.99):>7,} "
               f"{max(clean.lateness, default=0):>7,} {clean.early:>5} | "
               + (f"{killed.lost:>10,} {killed.duplicated:>6,}" if killed
                  else f"{'-':>10} {'-':>6}")
               + (f"   (clean run lost {clean.lost})" if clean.lost else ""))
        rows.append(row)
        print(row, flush=True)
    print("\n" + header)
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
