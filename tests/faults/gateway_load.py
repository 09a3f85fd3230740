"""The gateway's share of the fault matrix: Apache's official RocketMQ 5 client
(``rocketmq-python-client``, the gateway's pin) sending through the stack's gateway, and a
SimpleConsumer of one group receiving through it, while every fault of the matrix - the
gateway's own SIGKILL among them - comes and goes.

The consumer acks what it receives, except the first delivery of every ``HOLD_EVERY``-th
message, which it leaves to run out (its invisible time, ``INVISIBLE_S``): those must come back,
and nothing may come back before its time. A call that fails while the gateway is down is made
again, as an application would (the client reconnects by itself). What it saw is checked from
its own records (:meth:`GatewayTraffic.lost`, :meth:`early`, ...), never from logs:

- every acknowledged send was received and acked (nothing lost, SPEC P2);
- every message held on purpose came back, with a later delivery attempt (R8);
- no message was handed out again before the invisible time of its last receipt ran out, unless
  a fault that loses the gateway's state in Redis, or an acknowledgement, was under way;
- a message whose ack was answered OK is not received again, unless a fault was under way.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from clepsydra_gateway.mapping import ReceiptHandle
from tests.faults.load import Disruption, _cause

INVISIBLE_S = 4
"""The invisible time the consumer asks for: a held message comes back after it (plus the retry
level's 1 s)."""
HOLD_EVERY = 7
"""Every 7th message's first delivery is left to run out."""
RATE = 8
"""Sends a second (beside the matrix's 40 through the SDK)."""
STATE_FAULTS = ("redis", "redis-empty")
"""Faults that may lose the gateway's deliveries under way (Redis restarted empty, or the last
second of its append-only file): a message handed out again early is charged to them."""


Place = tuple[str, int, int, int]
"""Where a delivered copy is stored: topic (``%RETRY%<group>`` for a copy sent back), shard,
queue, offset - from its receipt handle. A message may have several copies (a send the client
tried again after its answer was lost, a send-back a crash cut and the gateway made again),
each delivered on its own."""


@dataclass(slots=True)
class Receipt:
    seq: int
    msg_id: str
    place: Place
    attempt: int
    asked_ms: int
    """When the receive that got it was asked (epoch ms): no handout of it is earlier."""
    got_ms: int
    acked: bool | None
    """True: the ack answered OK; False: it failed (the gateway down); None: held on purpose."""
    done_ms: int = 0
    """When the ack answered (or failed)."""


@dataclass(eq=False)
class GatewayTraffic:
    endpoint: str
    topic: str
    group: str
    sent: dict[int, str] = field(default_factory=dict)
    """seq -> msgId of every acknowledged send."""
    send_failures: int = 0
    receive_failures: int = 0
    receipts: list[Receipt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop_sending = threading.Event()
        self.stop_receiving = threading.Event()
        self.lock = threading.Lock()
        config = ClientConfiguration(self.endpoint, Credentials())
        self.producer = Producer(config, (self.topic,))
        self.consumer = SimpleConsumer(config, self.group, {self.topic: FilterExpression()},
                                       await_duration=1)
        self._threads = [  # daemons: a test that fails half-way does not hang at its exit
            threading.Thread(target=self._send_loop, name="gateway-sends", daemon=True),
            threading.Thread(target=self._receive_loop, name="gateway-receives", daemon=True)]

    def start(self) -> None:
        self.producer.startup()
        self.consumer.startup()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.stop_sending.set()
        self.stop_receiving.set()
        for thread in self._threads:
            thread.join(30)
        for part in (self.producer, self.consumer):
            try:
                part.shutdown()
            except Exception:  # the gateway may be gone: nothing left to close cleanly
                pass

    def _send_loop(self) -> None:
        seq = 0
        while not self.stop_sending.is_set():
            m = Message()
            m.topic = self.topic
            m.body = str(seq).encode()
            try:
                receipt = self.producer.send(m)
                with self.lock:
                    self.sent[seq] = receipt.message_id
            except Exception:  # not acknowledged (the gateway or the store down)
                with self.lock:
                    self.send_failures += 1
            seq += 1
            self.stop_sending.wait(1 / RATE)

    def _receive_loop(self) -> None:
        while not self.stop_receiving.is_set():
            asked = _now_ms()
            try:
                batch = self.consumer.receive(16, INVISIBLE_S)
            except Exception:  # the gateway down: the client reconnects, ask again
                with self.lock:
                    self.receive_failures += 1
                self.stop_receiving.wait(0.5)
                continue
            got = _now_ms()
            for m in batch:
                seq = int(m.body.decode())
                acked: bool | None = None
                if seq % HOLD_EVERY or m.delivery_attempt > 1:
                    try:
                        self.consumer.ack(m)
                        acked = True
                    except Exception:  # expired, or the gateway down: it comes back
                        acked = False
                handle = ReceiptHandle.decode(m.receipt_handle)
                place = (handle.topic, handle.shard, handle.queue_id, handle.queue_offset)
                with self.lock:
                    self.receipts.append(Receipt(seq, m.message_id, place, m.delivery_attempt,
                                                 asked, got, acked, _now_ms()))

    # ---- the books -------------------------------------------------------------------------

    def _by_seq(self) -> dict[int, list[Receipt]]:
        with self.lock:
            receipts = list(self.receipts)
        out: dict[int, list[Receipt]] = {}
        for r in sorted(receipts, key=lambda r: r.got_ms):
            out.setdefault(r.seq, []).append(r)
        return out

    def _by_place(self) -> dict[Place, list[Receipt]]:
        """The deliveries of each stored copy, in order."""
        out: dict[Place, list[Receipt]] = {}
        for rs in self._by_seq().values():
            for r in rs:
                out.setdefault(r.place, []).append(r)
        return out

    def lost(self, injected: list[Disruption]) -> list[int]:
        """Acknowledged sends not received and acked at last - but for one whose last ack
        failed while a fault was under way: its answer may be what was lost (the gateway
        settled it, then died), and a settled message does not come back."""
        by_seq = self._by_seq()
        with self.lock:
            sent = list(self.sent)
        out = []
        for s in sent:
            rs = by_seq.get(s, [])
            if any(r.acked for r in rs):
                continue
            if rs and rs[-1].acked is False and _cause(injected, rs[-1].got_ms,
                                                       rs[-1].done_ms) != "none":
                continue
            out.append(s)
        return out

    def not_back(self) -> list[int]:
        """Messages held on purpose (their first delivery let run out) never received again."""
        return [s for s, rs in self._by_seq().items() if rs[0].acked is None and len(rs) < 2]

    def settled(self, injected: list[Disruption]) -> bool:
        return not self.lost(injected) and not self.not_back()

    def early(self, injected: list[Disruption]) -> list[tuple[int, int, str]]:
        """(seq, ms early, cause) of every delivery of a stored copy that came before the
        invisible time of the one before it ran out (that one's receive asked +
        INVISIBLE_S), where no fault that loses the gateway's state was under way between
        the two."""
        out = []
        for rs in self._by_place().values():
            seq = rs[0].seq
            for before, after in pairwise(rs):
                due = before.asked_ms + INVISIBLE_S * 1000
                if before.acked is not True and after.got_ms < due:  # acked: again_after_ack
                    causes = [d.name for d in injected if d.name in STATE_FAULTS
                              and d.began_ms <= after.got_ms and d.over_ms >= before.asked_ms]
                    if not causes:
                        out.append((seq, due - after.got_ms, "none"))
        return out

    def again_after_ack(self, injected: list[Disruption]) -> Counter[str]:
        """Deliveries of a stored copy after an ack of it answered OK, per cause: a fault that
        loses the gateway's state in Redis under way between the ack and the delivery again
        (the ack itself lost), else the fault under way between its first delivery and the
        one again ("none": no fault explains it)."""
        again: Counter[str] = Counter()
        for rs in self._by_place().values():
            acked_at = next((r.got_ms for r in rs if r.acked), None)
            if acked_at is None:
                continue
            for r in rs:
                if r.got_ms > acked_at:
                    again[_again_cause(injected, rs[0].asked_ms, acked_at, r.got_ms)] += 1
        return again

    def unexplained(self, injected: list[Disruption]) -> list[list[Receipt]]:
        """Every message's receipts where a copy was received again after an OK ack, or
        before its invisible time ran out, with no fault to explain it (what the matrix prints
        when it fails)."""
        bad = {seq for seq, _, _ in self.early(injected)}
        for rs in self._by_place().values():
            acked_at = next((r.got_ms for r in rs if r.acked), None)
            if acked_at is not None and any(
                    r.got_ms > acked_at
                    and _again_cause(injected, rs[0].asked_ms, acked_at, r.got_ms) == "none"
                    for r in rs):
                bad.add(rs[0].seq)
        by_seq = self._by_seq()
        return [by_seq[s] for s in sorted(bad)]

    def copies(self) -> Counter[str]:
        """Messages stored more than once, by the topic of the extra copies (the original
        topic: a send the client tried again after its answer was lost; ``%RETRY%``: a
        send-back made again after a crash cut it)."""
        out: Counter[str] = Counter()
        for rs in self._by_seq().values():
            places = {r.place for r in rs}
            for topic in {p[0] for p in places}:
                out[topic] += sum(1 for p in places if p[0] == topic) - 1
        return +out

    def summary(self, injected: list[Disruption]) -> dict[str, object]:
        by_seq = self._by_seq()
        with self.lock:
            sent, failures = len(self.sent), (self.send_failures, self.receive_failures)
        return {"acked sends": sent, "failed sends": failures[0],
                "failed receives": failures[1],
                "received": sum(len(rs) for rs in by_seq.values()),
                "held and back": sum(1 for rs in by_seq.values()
                                     if rs[0].acked is None and len(rs) > 1),
                "back with a later attempt": sum(1 for rs in by_seq.values()
                                                 if rs[0].acked is None
                                                 and any(r.attempt > rs[0].attempt for r in rs)),
                "acks failed": sum(1 for rs in by_seq.values() for r in rs if r.acked is False),
                "lost": len(self.lost(injected)), "early": len(self.early(injected)),
                "extra copies": dict(self.copies()),
                "again after ack": dict(self.again_after_ack(injected))}


def _again_cause(injected: list[Disruption], first_ms: int, acked_ms: int,
                 again_ms: int) -> str:
    lost_state = [d.name for d in injected if d.name in STATE_FAULTS
                  and d.began_ms <= again_ms and d.over_ms >= acked_ms]
    return lost_state[0] if lost_state else _cause(injected, first_ms, again_ms)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
