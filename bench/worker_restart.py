"""What a scheduler worker's restart costs its levels: kill -9 of the worker of the whole local
stack, and the time until every level's run, and the timers', of every store shard is running
again in the new process (DEC-scheduler-lease: a restarted worker takes its own leases back at
once; the fault matrix allows a delayed message its outage plus 2 s).

    .venv/bin/python -m bench.worker_restart [--shards 3] [--rounds 3]

Starts ``python -m tools.stack`` (``make run``'s stack, ``CLEPSYDRA_STORE_SHARDS=N``) under a
temporary home, waits until one worker process holds every lease (shards x (levels + timers)),
then, each round, SIGKILLs the worker's process group (the stack starts it again) and polls
Redis every 5 ms for the leases' holders. Printed per round, in ms from the kill:

  back    the new worker answers its /healthz (what the fault matrix calls back)
  first   the first lease held by the new process
  timers, level 1, level 3, level 18
          every shard's lease of the timers (of that level) held by the new process: the
          worker starts the timers' runs first, then the levels by delay
          (DEC-scheduler-restart-kick)
  shard S the last lease of shard S held by the new process
  all     every lease held by it; ``all - back`` is what the restart costs a level beyond the
          outage (each run takes its lease as its first step, then hands over what is due)

and the worker's CPU: its share of a core from back to all, and what it used before back.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
from pathlib import Path

import redis

from bench.scratch import scratch_dir
from bench.stack_cpu import process_cpu
from clepsydra_core import naming
from clepsydra_core.levels import DelayLevels
from clepsydra_scheduler.ports import LeaseToken
from tests.fixtures.stack import RunningStack, descendants, launch_stack, stop_stack
from tools.parts import SCHEDULER_WORKER
from tools.processes import http_ok, wait_until

POLL_S = 0.005


def lease_keys(shards: int) -> dict[str, tuple[int, str]]:
    """Every lease key of the stack -> (its shard, ``timers`` or ``level N``)."""
    keys = {}
    for shard in range(shards):
        keys[naming.timer_lease_key(shard)] = (shard, "timers")
        for level in DelayLevels.default().levels():
            keys[naming.delay_lease_key(level, shard)] = (shard, f"level {level}")
    return keys


def incarnations(client: redis.Redis, keys: list[str]) -> list[int | None]:
    """The incarnation holding each lease (None: free)."""
    found = []
    for raw in client.mget(keys):
        token = LeaseToken.decode(str(raw)) if raw else None
        found.append(token.holder.incarnation if token else None)
    return found


def worker_pid(stack: RunningStack) -> int | None:
    for pid in descendants(stack.proc.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(word.encode() in argv for word in SCHEDULER_WORKER.command) \
                and os.getpgid(pid) == pid:
            return pid
    return None


def cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user + system, its threads included)."""
    return sum(process_cpu(pid) or (0.0, 0.0))


def one_round(stack: RunningStack, client: redis.Redis,
              keys: dict[str, tuple[int, str]]) -> dict[str, float]:
    names = list(keys)
    held = incarnations(client, names)
    assert None not in held and len(set(held)) == 1, "not every lease held by one worker"
    old = held[0]
    victim = worker_pid(stack)
    assert victim is not None, "no scheduler worker below the stack"
    url = stack.url(str(SCHEDULER_WORKER.port_var))
    killed = time.monotonic()
    os.killpg(victim, signal.SIGKILL)
    figures: dict[str, float] = {}
    cpu_at_back, new_pid = 0.0, 0
    back_at: dict[str, float] = {}  # key -> when the new process held it
    while len(back_at) < len(keys) or "back" not in figures:
        now_ms = (time.monotonic() - killed) * 1000
        if now_ms > 120_000:
            raise TimeoutError(f"not every lease taken back in 2 min: {figures}")
        pid = worker_pid(stack)
        if "back" not in figures and pid not in (None, victim) and http_ok(f"{url}/healthz"):
            figures["back"] = now_ms
            new_pid, cpu_at_back = pid, cpu_s(pid)
        for name, inc in zip(names, incarnations(client, names), strict=True):
            if inc is not None and inc != old:
                back_at.setdefault(name, now_ms)
        time.sleep(POLL_S)
    figures["first"] = min(back_at.values())
    for group in ("timers", "level 1", "level 3", f"level {DelayLevels.default().max_level}"):
        figures[group] = max(at for name, at in back_at.items() if keys[name][1] == group)
    for shard in _shards(keys):
        figures[f"shard {shard}"] = max(at for name, at in back_at.items()
                                        if keys[name][0] == shard)
    figures["all"] = max(back_at.values())
    busy_ms = (cpu_s(new_pid) - cpu_at_back) * 1000
    figures["worker CPU % back..all"] = 100 * busy_ms / max(figures["all"] - figures["back"], 1)
    figures["worker CPU ms before back"] = cpu_at_back * 1000
    return figures


def _shards(keys: dict[str, tuple[int, str]]) -> list[int]:
    return sorted({shard for shard, _ in keys.values()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    home = scratch_dir("clepsydra-worker-restart-") / "home"
    stack = launch_stack(home, CLEPSYDRA_STORE_SHARDS=str(args.shards))
    try:
        client = redis.Redis(port=int(stack.env["CLEPSYDRA_REDIS_PORT"]),
                             decode_responses=True)
        keys = lease_keys(args.shards)

        def settled() -> bool:
            held = incarnations(client, list(keys))
            return None not in held and len(set(held)) == 1

        rows = []
        for n in range(args.rounds):
            wait_until(settled, 120, interval_s=0.2, what="every lease held by one worker")
            time.sleep(2.0)  # the runs at work, as when a worker dies
            figures = one_round(stack, client, keys)
            rows.append(figures)
            print(f"round {n + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items())
                  + f"; all - back {figures['all'] - figures['back']:,.0f} ms", flush=True)
        costs = [r["all"] - r["back"] for r in rows]
        print(f"{args.shards} shard(s), {len(keys)} leases: all - back (ms) median "
              f"{statistics.median(costs):,.0f}, max {max(costs):,.0f}")
    finally:
        stop_stack(stack)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
