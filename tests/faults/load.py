"""The fault matrix's steady load and its books: a producer thread sending numbered immediate
and delayed messages (levels and timers; what was acknowledged is recorded with the time the
send began), consumer processes in two groups, and the data read back from the store to check
the invariants -- and the lateness each fault cost the delayed messages (SPEC D10).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from clepsydra_client import Producer
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.msgid import shard_of_offset_msg_id
from tests.faults.consumer import FAIL_ALWAYS
from tools.processes import REPO

CONSUMER_FAULT = "consumer"
"""The fault matrix's name of a consumer crash."""
# (delay level, its delay in ms with the default table): immediate, 1 s, 5 s; a timer message
# (level 0, ``delay`` 2 s: the timers' hand-over, SPEC T1)
DELAYS = ((0, 0), (1, 1000), (2, 5000), (0, 2000))
LATENESS_LEAD_MS = 1_000
"""A fault is charged the lateness of the delayed messages falling due from this long before
it was injected until its part answered again (:func:`max_lateness`)."""
LATENESS_SLACK_MS = 2_000
"""What a crash may cost a delayed message beyond the time its part took to answer again."""


@dataclass(frozen=True, slots=True)
class Sent:
    seq: int
    phase: str
    level: int
    delay_ms: int
    began_ms: int
    shard: int = 0
    """The store shard that acknowledged it (DEC-store-shards)."""


@dataclass(slots=True)
class Disruption:
    """One injected fault: its name, when it was injected and when its part was back (epoch
    ms; ``over_ms`` is the injection time until the recovery is seen)."""

    name: str
    began_ms: int
    over_ms: int


@dataclass(eq=False)
class Producing(threading.Thread):
    """Sends ``rate`` messages a second to ``topic`` until stopped; every acknowledged send is
    in ``acked``, every refused or failed one counted in ``failed`` (a send the store may or may
    not have kept: at-least-once producing allows it to appear, it is never checked)."""

    store_url: str
    topic: str
    rate: float = 40.0
    phase: str = "warm-up"
    acked: list[Sent] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name="fault-producer", daemon=True)

    def run(self) -> None:
        producer = Producer(self.store_url, timeout_s=5.0)
        seq = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            seq += 1
            level, delay_ms = DELAYS[seq % len(DELAYS)]
            phase = self.phase
            began = int(time.time() * 1000)
            body = json.dumps({"seq": seq, "phase": phase})
            try:
                if level or not delay_ms:
                    result = producer.send(self.topic, body, delay_level=level)
                else:
                    result = producer.send(self.topic, body, delay=delay_ms)
            except (ClepsydraError, OSError, requests.RequestException):
                self.failed[phase] += 1
            else:
                self.acked.append(Sent(seq, phase, level, delay_ms, began,
                                       shard_of_offset_msg_id(result.offset_msg_id) or 0))
            next_at += 1.0 / self.rate
            pause = next_at - time.monotonic()
            if pause > 0:
                self.stop.wait(pause)
            else:
                next_at = time.monotonic()


class ConsumerProcess:
    """``python -m tests.faults.consumer`` as a child of the test, restartable."""

    def __init__(self, group: str, topic: str, out: Path, env: dict[str, str], *,
                 fail: bool = False, orderly: bool = False) -> None:
        self.argv = [sys.executable, "-m", "tests.faults.consumer", group, topic, str(out)]
        if fail:
            self.argv.append("--fail")
        if orderly:
            self.argv.append("--orderly")
        self.env, self.out, self.group = env, out, group
        self.log = out.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def lines(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        text = self.out.read_text()
        # a line cut by a kill -9 mid-write is not an attempt the listener answered
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def pull_all(store_url: str, topic: str) -> Iterator[dict[str, Any]]:
    """Every message of every queue of ``topic`` from offset 0, on every store shard (its
    route, DEC-store-shards; an absent topic: none)."""
    described = requests.get(f"{store_url}/v1/routes/{quote(topic, safe='')}", timeout=10)
    if described.status_code == 404:
        return
    described.raise_for_status()
    route = described.json()
    assert not route["unreachable"], f"shards {route['unreachable']} did not answer"
    for queue in route["queues"]:
        offset = queue.get("minOffset", 0)
        while True:
            page = requests.get(
                f"{queue['url']}/v1/topics/{quote(topic, safe='')}/queues/"
                f"{queue['queueId']}/messages", params={"offset": offset, "max": 500},
                timeout=10)
            page.raise_for_status()
            answer = page.json()
            yield from answer["messages"]
            if not answer["messages"]:
                break
            offset = answer["nextOffset"]


def deliveries(store_url: str, topics: list[str]) -> list[tuple[int, int]]:
    """(deliver time, store time) of every delayed message's delivered copy in ``topics``
    (the copies carry ``DELIVER_TS``; their store time is when they arrived, SPEC D10)."""
    out = []
    for topic in topics:
        for m in pull_all(store_url, topic):
            due = (m.get("properties") or {}).get(P.DELIVER_TS)
            if due is not None:
                out.append((int(due), int(m["storeTimestamp"])))
    return out


def max_lateness(injected: list[Disruption], delivered: list[tuple[int, int]]
                 ) -> list[int | None]:
    """Per injected fault, the largest lateness (store time - deliver time) of the delayed
    messages that fell due around it: from ``LATENESS_LEAD_MS`` before its injection until its
    part answered again (those due later met a part already back); None when none fell due
    then."""
    out: list[int | None] = []
    for d in injected:
        late = [stored - due for due, stored in delivered
                if d.began_ms - LATENESS_LEAD_MS <= due <= d.over_ms]
        out.append(max(late) if late else None)
    return out


def seqs_in(store_url: str, topic: str) -> Counter[int]:
    """How many copies of each ``seq`` the topic holds."""
    return Counter(json.loads(_body(m))["seq"] for m in pull_all(store_url, topic))


def _body(message: dict[str, Any]) -> str:
    if "body" in message:
        return str(message["body"])
    import base64

    return base64.b64decode(message["bodyBase64"]).decode()


@dataclass
class Books:
    """What each acknowledged message became, per phase: the invariants of the fault matrix."""

    acked: list[Sent]
    in_topic: Counter[int]
    in_dlq: Counter[int]
    passing: list[dict[str, Any]]
    failing: list[dict[str, Any]]

    def end_state_missing(self) -> dict[str, list[int]]:
        """Acknowledged seqs not (yet) at their end state, per check."""
        ok_a = {line["seq"] for line in self.passing if line["ok"]}
        ok_b = {line["seq"] for line in self.failing if line["ok"]}
        missing: dict[str, list[int]] = defaultdict(list)
        for sent in self.acked:
            if self.in_topic[sent.seq] == 0:
                missing["not in its topic"].append(sent.seq)
            if sent.seq not in ok_a:
                missing["never consumed by the passing group"].append(sent.seq)
            if sent.seq % FAIL_ALWAYS == 0:
                if self.in_dlq[sent.seq] == 0:
                    missing["not dead-lettered by the failing group"].append(sent.seq)
            elif sent.seq not in ok_b:
                missing["never consumed by the failing group"].append(sent.seq)
        return dict(missing)

    def early(self) -> list[tuple[int, int]]:
        """(seq, ms early) of every delivery seen before its time."""
        due = {s.seq: s.began_ms + s.delay_ms for s in self.acked if s.delay_ms}
        return [(line["seq"], due[line["seq"]] - line["t"])
                for line in self.passing + self.failing
                if line["reconsume"] == 0 and line["seq"] in due and line["t"] < due[line["seq"]]]

    def duplicates_by_cause(self, injected: list[Disruption]) -> Counter[str]:
        """Consumer duplicates (the listener called again for an attempt it had seen) per the
        fault that was under way between the two calls -- for a retry, since the attempt before
        it, whose send-back a crash may have written twice -- "none" when none was. An attempt that
        failed twice was sent back twice, so its next attempt comes twice as well: that
        duplicate is charged to the cause of the first."""
        first: dict[tuple[str, int, int], int] = {}
        cause_of: dict[tuple[str, int, int], str] = {}
        again: Counter[str] = Counter()
        for line in sorted(self.passing + self.failing, key=lambda ln: ln["t"]):
            group, seq, n = line["group"], line["seq"], line["reconsume"]
            attempt = (group, seq, n)
            if attempt in first:
                since = first.get((group, seq, n - 1), first[attempt])
                cause = _cause(injected, since, line["t"])
                if cause == "none":
                    cause = cause_of.get((group, seq, n - 1), cause)
                cause_of.setdefault(attempt, cause)
                again[cause] += 1
            else:
                first[attempt] = line["t"]
        return again

    def table(self, phases: list[str], injected: list[Disruption],
              recovery_ms: dict[str, list[int]], failed_sends: Counter[str],
              lateness_ms: dict[str, list[int | None]]) -> list[dict[str, Any]]:
        """One row per phase: runs, acknowledged and lost (of the messages sent during it),
        store copies > 1, refused sends, recovery times (each run's: until its part answered
        again), the max lateness of a delayed message each run cost (:func:`max_lateness`),
        and consumer duplicates (the listener called again for an attempt it had seen) charged
        to the fault under way between the two calls ("none" when no fault was: a duplicate
        nothing explains)."""
        missing = {seq for seqs in self.end_state_missing().values() for seq in seqs}
        again = self.duplicates_by_cause(injected)
        rows = []
        for phase in phases:
            sent = [s for s in self.acked if s.phase == phase]
            seqs = {s.seq for s in sent}
            rows.append({
                "fault": phase,
                "runs": len(recovery_ms.get(phase, [])),
                "acked": len(sent),
                "lost": len(seqs & missing),
                "store_duplicates": sum(1 for s in seqs if self.in_topic[s] > 1),
                "consumer_duplicates": again.get(phase, 0),
                "refused_sends": failed_sends.get(phase, 0),
                "recovery_ms": recovery_ms.get(phase, []),
                "max_lateness_ms": lateness_ms.get(phase, []),
            })
        return rows



def _cause(injected: list[Disruption], first_ms: int, again_ms: int) -> str:
    """The fault that made the listener see an attempt again: a consumer crash under way
    between the two calls when there was one (it loses every acknowledgement not yet committed,
    and its queues are taken over some 15 s later, while other faults go on), else the first
    fault under way between them. A fault is under way from its injection until its part is
    back, not only at the instant it is injected: while the disk is full, a send-back fails and
    the attempt is consumed again locally (R9), seconds after the fault began."""
    causes = [d.name for d in injected if d.began_ms <= again_ms and d.over_ms >= first_ms]
    if CONSUMER_FAULT in causes:
        return CONSUMER_FAULT
    return causes[0] if causes else "none"


def order_breaks(lines: list[dict[str, Any]]) -> list[tuple[tuple[int, int], int, int]]:
    """((shard, queue), offset, highest offset seen before) of every time an orderly group
    processed a queue offset beyond the next one: a message skipped over, or taken out of order.
    After a crash a queue may go back to its committed offset (at least once); it may never jump
    ahead."""
    highest: dict[tuple[int, int], int] = {}
    breaks = []
    for line in sorted(lines, key=lambda ln: ln["t"]):
        queue, offset = (line.get("shard", 0), line["queue"]), line["offset"]
        top = highest.get(queue, offset - 1)
        if offset > top + 1:
            breaks.append((queue, offset, top))
        highest[queue] = max(top, offset)
    return breaks
