"""One store shard of three killed under a steady load (DEC-store-shards, DEC-shard-send-retry):
``CLEPSYDRA_STORE_SHARDS=3`` as ``make run`` starts it, a producer sending immediate messages,
messages delayed by level and timer messages (``deliver_at``), a group that passes everything
and one that retries a share and dead-letters another. Shard 1 is killed with SIGKILL (its
whole process group) and kept down for ``DOWN_S`` (the stack's supervisor paused, so it does not
restart it at once), then the supervisor restarts it.

Checked from the data, as the fault matrix does:
- producers go on through the other shards: at most the send racing the kill fails;
- every acknowledged message reaches its end in every group, each consumed once (a shard's
  crash loses no consumer's acknowledgement), and is stored once;
- the delayed messages of the dead shard that fell due while it was down are delivered after
  its restart, none early; their lateness (arrival - due time) is printed (README, "Fault
  tolerance": the row "a store shard").
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from clepsydra_client import AdminClient
from clepsydra_core.shards import shard_port
from tests.faults.consumer import FAIL_ALWAYS
from tests.faults.load import Books, ConsumerProcess, Producing, seqs_in
from tests.fixtures.stack import RunningStack, descendants, stack_factory
from tools.processes import wait_until

pytestmark = pytest.mark.faults

TOPIC = "shard-orders"
PASSING, FAILING = "shard-passing", "shard-failing"
SHARDS = 3
VICTIM = 1
DOWN_S = 8.0
"""Longer than the longest delay sent (5 s): messages of every kind fall due while it is down."""
DRAIN_TIMEOUT_S = 180.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[RunningStack]:
    factory = stack_factory(tmp_path)
    start = next(factory)
    yield start("--max-restarts", "50", "--quiet", "--without-analytics",
                CLEPSYDRA_STORE_SHARDS=str(SHARDS))
    next(factory, None)


def _shard_url(stack: RunningStack, shard: int) -> str:
    return f"http://127.0.0.1:{shard_port(int(stack.env['CLEPSYDRA_STORE_PORT']), shard)}"


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _shard_group(stack: RunningStack, shard: int) -> int:
    """The process group of store shard ``shard`` (its leader's pid)."""
    for pid in descendants(stack.proc.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile
        if b"clepsydra_store" in argv and f"CLEPSYDRA_STORE_SHARD_ID={shard}".encode() in env \
                and os.getpgid(pid) == pid:
            return pid
    raise AssertionError(f"no store shard {shard} below the stack")


@pytest.mark.timeout(600)
def test_a_killed_shard_stops_only_its_share_and_loses_nothing(
        stack: RunningStack, tmp_path: Path) -> None:
    admin = AdminClient(stack.store_url, stack.retry_url)
    created = admin.create_topic(TOPIC, 2)
    assert created.shards is not None and created.shards.applied == [0, 1, 2]
    admin.set_group_settings(FAILING, retry_max_times=1)  # one retry, then the DLQ
    env = {**os.environ, "CLEPSYDRA_STORE_URL": stack.store_url,
           "CLEPSYDRA_RETRY_URL": stack.retry_url, "CLEPSYDRA_OTEL_EXPORTER": "none"}
    consumers = [ConsumerProcess(PASSING, TOPIC, tmp_path / "passing.jsonl", env),
                 ConsumerProcess(FAILING, TOPIC, tmp_path / "failing.jsonl", env, fail=True)]
    producing = Producing(stack.store_url, TOPIC)
    try:
        for consumer in consumers:
            consumer.start()
        producing.start()
        wait_until(lambda: consumers[0].lines() != [], 60, what="the first consumed message")
        time.sleep(4.0)
        os.kill(stack.proc.pid, signal.SIGSTOP)  # the supervisor restarts nothing meanwhile
        try:
            victim_group = _shard_group(stack, VICTIM)  # a /proc walk: slow under load
            os.killpg(victim_group, signal.SIGKILL)
            # the phase and the clock read after the kill: a send begun before it may still be
            # acknowledged by the shard (seen under load: one begun during the walk above, in
            # the phase "shard-down", stored on the victim), and a message due before it may
            # have been handed over in the shard's last moments
            producing.phase = "shard-down"
            killed_ms = int(time.time() * 1000)
            time.sleep(DOWN_S)
        finally:
            os.kill(stack.proc.pid, signal.SIGCONT)
        victim = _shard_url(stack, VICTIM)
        down_ms = [killed_ms]  # when a probe last went out and found the shard not answering

        def back() -> bool:
            sent = int(time.time() * 1000)
            if _healthy(victim):
                return True
            down_ms[0] = sent
            return False

        wait_until(back, 60, interval_s=0.1, what="the shard back")
        back_ms = int(time.time() * 1000)
        last_down_ms = down_ms[0]
        producing.phase = "after"
        time.sleep(5.0)
    finally:
        producing.stop.set()
        producing.join(30)

    def books() -> Books:
        return Books(list(producing.acked), seqs_in(stack.store_url, TOPIC),
                     seqs_in(stack.store_url, f"%DLQ%{FAILING}"),
                     consumers[0].lines(), consumers[1].lines())

    try:
        wait_until(lambda: not books().end_state_missing(), DRAIN_TIMEOUT_S, interval_s=2.0,
                   what="every message at its end")
    except TimeoutError:
        pass  # the assertions say what is missing
    finally:
        for consumer in consumers:
            consumer.stop()
    b = books()
    acked = producing.acked
    down = [s for s in acked if s.phase == "shard-down"]
    # producers went on through the other shards
    assert len(down) > DOWN_S * 20 and all(s.shard != VICTIM for s in down)
    assert producing.failed["shard-down"] <= 1, producing.failed
    assert {s.shard for s in acked if s.phase == "after"} == {0, 1, 2}  # it takes sends again
    # nothing lost, nothing stored twice, nothing early
    missing = b.end_state_missing()
    assert missing == {}, {k: v[:20] for k, v in missing.items()}
    assert [s for s, n in b.in_topic.items() if n > 1] == []
    assert b.early() == []
    # every group consumed each acknowledged message once
    for lines in (b.passing, b.failing):
        ok = Counter(line["seq"] for line in lines if line["ok"])
        assert [seq for seq, n in ok.items() if n > 1] == []
    expected_ok = {s.seq for s in acked if s.seq % FAIL_ALWAYS}
    assert {line["seq"] for line in b.failing if line["ok"]} == expected_ok
    # the dead shard's delayed messages due while it was down: after its restart, none early
    first_seen = {}
    for line in sorted(b.passing, key=lambda ln: ln["t"]):
        first_seen.setdefault(line["seq"], line["t"])
    stranded = [s for s in acked if s.shard == VICTIM and s.delay_ms
                and killed_ms <= s.began_ms + s.delay_ms <= back_ms]
    assert stranded, "no delayed message of the killed shard fell due while it was down"
    lateness = sorted(first_seen[s.seq] - (s.began_ms + s.delay_ms) for s in stranded)
    assert all(late >= 0 for late in lateness)
    # none consumed before the shard was back: the last probe that found it not answering was
    # sent before it served again (a probe's answer can come up to its 2 s timeout later, so
    # back_ms itself may be well after the shard's first hand-over)
    early_back = [(s.seq, first_seen[s.seq] - last_down_ms) for s in stranded
                  if first_seen[s.seq] < last_down_ms]
    assert early_back == [], f"consumed while the shard was down (seq, ms from its last " \
        f"probe down): {early_back[:10]}; killed at {killed_ms}, back at {back_ms}"
    kinds = Counter("timer" if s.level == 0 else f"level {s.level}" for s in stranded)
    report = {"shards": SHARDS, "down_ms": back_ms - killed_ms, "acked": len(acked),
              "acked_while_down": len(down), "refused_while_down": producing.failed["shard-down"],
              "stranded_delayed": dict(kinds), "lateness_ms": {
                  "min": lateness[0], "p50": int(statistics.median(lateness)),
                  "max": lateness[-1]},
              "after_back_ms": {"p50": int(statistics.median(
                  first_seen[s.seq] - back_ms for s in stranded))}}
    print("\nshard loss:\n" + json.dumps(report, indent=1))
    assert stack.proc.poll() is None, stack.why()
    assert all(_healthy(_shard_url(stack, s)) for s in range(SHARDS))
