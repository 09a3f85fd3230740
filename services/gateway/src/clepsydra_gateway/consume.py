"""RocketMQ 5's consumer model (receive, ack, invisible time, pop) over Clepsydra's (the store's
pull and group offsets, the retry service's send-back): DEC-gateway-pop-over-pull.

- ``receive`` looks at every queue of the topic and of the group's ``%RETRY%<group>`` - on
  every store shard (DEC-store-shards), a shard that does not answer left out for a moment
  while the others go on - from the group's cursor in each, and hands out up to the batch:
  each message invisible until its deadline. It holds the call (long polling) until a message
  comes or the time is up, woken at once by a send or an ack through this gateway, else every
  ``poll_ms``.
- ``ack`` ends a delivery; the group commits to the queue's store shard the smallest offset
  still under way (SPEC C4), so the project's SDK, CLI and DLQ toolkit see the same progress.
- A delivery not acked in time is sent back by the sweeper through the retry service (level 1:
  the first of the table), so it comes back from ``%RETRY%<group>`` with ``reconsumeTimes`` + 1
  and, past the group's max, lands in ``%DLQ%<group>`` (SPEC R5-R8). A FIFO group's comes back
  in place instead, in order, and is dead-lettered after the max attempts (DEC-gateway-fifo).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from opentelemetry import context as otel_context

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError, OffsetOutOfRange, Unavailable
from clepsydra_core.retry_rules import DLQ_LEVEL
from clepsydra_gateway.backend import Backend, TopicInfo
from clepsydra_gateway.mapping import (
    GatewayError,
    ReceiptHandle,
    Status,
    delivery_attempt,
    max_attempts,
    parse_member,
)
from clepsydra_gateway.settings import GatewaySettings
from clepsydra_gateway.state import IN_FLIGHT, SETTLING, VISIBLE, Delivery, GatewayState

logger = logging.getLogger(__name__)

RETRY_LEVEL = 1
"""The level a delivery whose invisible time ran out is sent back with: the table's first, so
it comes back as soon as the table allows after the time the consumer chose (the consumer's
back-off, R7's ladder, is in the invisible time it asked for: DEC-gateway-pop-over-pull)."""
CLAIM_MS = 30_000
"""A gateway settling a delivery (a send-back under way) holds it this long; one that died
meanwhile leaves it to another after that."""
SWEEP_S = 0.2
COMMIT_EVERY_S = 0.5
"""How often the groups' progress is committed to the store."""
CLIENT_TTL_S = 30
"""A client not heard from for this long is gone: its PushConsumer's messages are no longer
renewed."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Handed:
    """A message handed out: the store's view of it, its handle, attempt and invisible time."""

    message: dict[str, Any]
    handle: ReceiptHandle
    attempt: int
    invisible_ms: int


@dataclass(frozen=True, slots=True)
class ReceiveAsk:
    group: str
    topic: str
    tags: str | None
    batch: int
    invisible_ms: int
    auto_renew: bool
    client_id: str
    wait_s: float
    token: str | None


class Consumption:
    """Receive, ack, change invisible time, dead-letter; and the sweeper of deliveries whose
    time ran out (a thread of each gateway process: ``start_sweeper``)."""

    def __init__(self, settings: GatewaySettings, state: GatewayState, backend: Backend,
                 *, count: Callable[[str], None] = lambda _outcome: None) -> None:
        self.settings = settings
        self.state = state
        self.backend = backend
        self._count = count
        self._wake = threading.Condition()
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._dirty: dict[tuple[str, str, int, int], tuple[int, str | None]] = {}
        """(group, topic, shard, queue id) -> the offset to commit, the token to commit with."""
        self._dirty_lock = threading.Lock()

    # ---- the group's mode --------------------------------------------------------------

    def is_fifo(self, group: str) -> bool:
        return any(fnmatchcase(group, p) for p in self.settings.fifo_groups)

    def wake(self) -> None:
        """A send or an ack here: held receives look again now."""
        with self._wake:
            self._wake.notify_all()

    # ---- receive -----------------------------------------------------------------------

    def receive(self, ask: ReceiveAsk, alive: Callable[[], bool]) -> list[Handed]:
        """Up to ``ask.batch`` messages of the topic (and of the group's retry topic), held
        until one comes, ``ask.wait_s`` passes or the client went away (``alive``)."""
        info = self.backend.topic(ask.topic, ask.token)
        if info is None:
            raise GatewayError(Status.TOPIC_NOT_FOUND, f"topic {ask.topic} does not exist")
        give_up = time.monotonic() + ask.wait_s
        floors: dict[tuple[str, int], dict[int, int]] = {}
        fifo = self.is_fifo(ask.group)
        with _untraced():  # polls make no span (docs/tracing.md); the RPC's span says it all
            return self._receive_loop(ask, info, give_up, floors, fifo, alive)

    def _receive_loop(self, ask: ReceiveAsk, info: TopicInfo, give_up: float,
                      floors: dict[tuple[str, int], dict[int, int]], fifo: bool,
                      alive: Callable[[], bool]) -> list[Handed]:
        while True:
            sources = [info]
            retry = self.backend.topic(naming.retry_topic(ask.group), ask.token,
                                       unreadable_is_none=True)
            if retry is not None:
                sources.append(retry)
            handed = self._one_pass(ask, sources, floors, fifo)
            left = give_up - time.monotonic()
            if handed or left <= 0 or not alive():
                return handed
            with self._wake:
                self._wake.wait(min(left, self.settings.poll_ms / 1000))

    def _floor(self, ask: ReceiveAsk, topic: TopicInfo, shard: int, queue_id: int,
               floors: dict[tuple[str, int], dict[int, int]]) -> int:
        """Where the group's progress is in a queue: its committed offset (on the queue's
        shard), else the queue's first message (DEC-gateway-pop-over-pull)."""
        committed = floors.get((topic.name, shard))
        if committed is None:
            committed = floors[(topic.name, shard)] = self.backend.group_offsets(
                ask.group, topic.name, shard, ask.token)
        return committed.get(queue_id, topic.min_offsets.get((shard, queue_id), 0))

    def _ends(self, ask: ReceiveAsk, sources: list[TopicInfo]
              ) -> dict[tuple[str, int], dict[int, int]]:
        """Each queue's end, by (topic, shard), of the shards that answer now: a shard that
        does not is left out of this pass (and for a moment: Backend.rest), the others go on."""
        ends: dict[tuple[str, int], dict[int, int]] = {}
        for topic in sources:
            for shard in topic.shards:
                if not self.backend.usable(shard):
                    continue
                try:
                    ends[(topic.name, shard)] = self.backend.max_offsets(topic.name, shard,
                                                                         ask.token)
                except Unavailable as exc:
                    if self.backend.router() is None:
                        raise  # one store: its error, as before shards
                    self.backend.rest(shard, exc)
        return ends

    def _one_pass(self, ask: ReceiveAsk, sources: list[TopicInfo],
                  floors: dict[tuple[str, int], dict[int, int]], fifo: bool) -> list[Handed]:
        ends = self._ends(ask, sources)
        queues = [(t, shard, q) for t in sources for shard, q in t.places
                  if (t.name, shard) in ends]
        if not queues:
            return []
        start = next(self._turn) % len(queues)
        out: list[Handed] = []
        first_pass = not floors
        down: set[int] = set()
        for topic, shard, queue_id in queues[start:] + queues[:start]:
            if len(out) >= ask.batch:
                break
            if shard in down:
                continue
            try:
                out += self._one_queue(ask, topic, shard, queue_id, ends, floors, fifo,
                                       first_pass, ask.batch - len(out))
            except Unavailable as exc:
                if self.backend.router() is None:
                    raise
                self.backend.rest(shard, exc)  # the other shards' queues go on
                down.add(shard)
        return out

    def _one_queue(self, ask: ReceiveAsk, topic: TopicInfo, shard: int, queue_id: int,
                   ends: dict[tuple[str, int], dict[int, int]],
                   floors: dict[tuple[str, int], dict[int, int]], fifo: bool,
                   first_pass: bool, room: int) -> list[Handed]:
        view = self.state.view(ask.group, topic.name, queue_id, shard=shard)
        cursor = view.cursor
        if cursor is None or (first_pass and not view.inflight):
            cursor = self.state.advance(ask.group, topic.name, queue_id,
                                        self._floor(ask, topic, shard, queue_id, floors),
                                        shard=shard)
        if (cursor >= ends[(topic.name, shard)].get(queue_id, 0)
                and not (fifo and view.inflight)):
            return []  # nothing past the cursor (nor a FIFO delivery to hand out again)
        try:
            if fifo:
                if any(d.s != VISIBLE for d in view.inflight.values()):
                    return []  # one batch of a FIFO queue at a time (DEC-gateway-fifo)
                if view.inflight:
                    return self._redeliver(ask, topic.name, shard, queue_id, view.inflight)
            return self._hand_out(ask, topic.name, shard, queue_id, cursor, room, fifo)
        except OffsetOutOfRange as exc:
            logger.warning("gateway cannot read group=%s topic=%s shard=%d queue_id=%d "
                           "queue_offset=%d: %s", ask.group, topic.name, shard, queue_id,
                           cursor, exc.message)
            return []

    def _delivery(self, ask: ReceiveAsk, message: dict[str, Any], attempt: int,
                  at_ms: int) -> Delivery:
        return Delivery(n=secrets.token_hex(8), d=at_ms + ask.invisible_ms, a=attempt,
                        m=message["msgId"], r=int(ask.auto_renew), c=ask.client_id, t=at_ms,
                        g=message.get("properties", {}).get(P.SHARDING_KEY, ""))

    def _hand_out(self, ask: ReceiveAsk, topic: str, shard: int, queue_id: int, cursor: int,
                  room: int, fifo: bool) -> list[Handed]:
        page = self.backend.pull(topic, shard, queue_id, cursor, room, ask.tags, ask.token)
        messages: list[dict[str, Any]] = page.get("messages", [])
        next_offset = int(page.get("nextOffset", cursor))
        if fifo:
            messages, next_offset = _one_per_group(messages, next_offset)
        if next_offset <= cursor and not messages:
            return []
        at = now_ms()
        chosen = [(m, self._delivery(ask, m, delivery_attempt(int(m.get("reconsumeTimes", 0))),
                                     at)) for m in messages]
        commit = self.state.hand_out(ask.group, topic, queue_id, cursor, next_offset,
                                     [(int(m["queueOffset"]), d) for m, d in chosen], fifo=fifo,
                                     shard=shard)
        if commit is None:
            return []  # another receive moved the cursor meanwhile: the next pass reads again
        self.commit(ask.group, topic, shard, queue_id, commit, ask.token)
        return [Handed(m, ReceiptHandle(ask.group, topic, queue_id, int(m["queueOffset"]), d.n,
                                        shard), d.a, ask.invisible_ms) for m, d in chosen]

    def _redeliver(self, ask: ReceiveAsk, topic: str, shard: int, queue_id: int,
                   inflight: dict[int, Delivery]) -> list[Handed]:
        """A FIFO queue's deliveries made visible, again in place and in order (the next
        attempt), one per message group."""
        offsets = sorted(inflight)
        page = self.backend.pull(topic, shard, queue_id, offsets[0],
                                 offsets[-1] - offsets[0] + 1, None, ask.token)
        by_offset = {int(m["queueOffset"]): m for m in page.get("messages", [])}
        at = now_ms()
        items: list[tuple[int, str, Delivery]] = []
        handed: list[Handed] = []
        groups: set[str] = set()
        for offset in offsets:
            old, message = inflight[offset], by_offset.get(offset)
            if message is None or (old.g and old.g in groups):
                break
            groups.add(old.g)
            new = old.but(n=secrets.token_hex(8), d=at + ask.invisible_ms, a=old.a + 1,
                          s=IN_FLIGHT, r=int(ask.auto_renew), c=ask.client_id)
            items.append((offset, old.n, new))
            handed.append(Handed(message, ReceiptHandle(ask.group, topic, queue_id, offset,
                                                        new.n, shard), new.a,
                                 ask.invisible_ms))
        if not items or not self.state.redeliver(ask.group, topic, queue_id, items,
                                                 shard=shard):
            return []
        return handed

    # ---- settling ----------------------------------------------------------------------

    def _under_way(self, group: str, handle_text: str) -> tuple[ReceiptHandle, Delivery]:
        handle = ReceiptHandle.decode(handle_text)
        if handle.group != group:
            raise GatewayError(Status.INVALID_RECEIPT_HANDLE,
                               f"the receipt handle is of group {handle.group}, not {group}")
        delivery = self.state.get(handle.group, handle.topic, handle.queue_id,
                                  handle.queue_offset, shard=handle.shard)
        if delivery is None or delivery.n != handle.nonce or delivery.s != IN_FLIGHT:
            raise _expired(handle)
        return handle, delivery

    def ack(self, group: str, handle_text: str, token: str | None) -> str:
        """End a delivery; the msgId it was."""
        handle = ReceiptHandle.decode(handle_text)
        if handle.group != group:
            raise GatewayError(Status.INVALID_RECEIPT_HANDLE,
                               f"the receipt handle is of group {handle.group}, not {group}")
        done, commit, msg_id = self.state.settle(handle.group, handle.topic, handle.queue_id,
                                                 handle.queue_offset, handle.nonce,
                                                 shard=handle.shard)
        if done != 1:
            raise _expired(handle)
        self.commit(group, handle.topic, handle.shard, handle.queue_id, commit, token)
        self.wake()
        return msg_id

    def change_invisible(self, group: str, handle_text: str, invisible_ms: int) -> str:
        """Move a delivery's deadline to now + ``invisible_ms`` (no longer renewed): its new
        receipt handle (the old one no longer acks)."""
        handle, delivery = self._under_way(group, handle_text)
        new = delivery.but(n=secrets.token_hex(8), d=now_ms() + invisible_ms, r=0)
        if self.state.replace(group, handle.topic, handle.queue_id, handle.queue_offset,
                              handle.nonce, new, shard=handle.shard) != 1:
            raise _expired(handle)
        return ReceiptHandle(group, handle.topic, handle.queue_id, handle.queue_offset,
                             new.n, handle.shard).encode()

    def forward_to_dlq(self, group: str, handle_text: str, client_id: str,
                       token: str | None) -> str:
        """A consumer gave up on a delivery (a FIFO PushConsumer after its local retries):
        straight to ``%DLQ%<group>`` (SPEC R6); the msgId."""
        handle, delivery = self._under_way(group, handle_text)
        self._settle_by_send_back(handle, delivery, DLQ_LEVEL, "the consumer forwarded it to "
                                  "the dead-letter queue", client_id, token, client_call=True)
        return delivery.m

    def _settle_by_send_back(self, handle: ReceiptHandle, delivery: Delivery, level: int,
                             reason: str, client_id: str, token: str | None, *,
                             client_call: bool, due_at: int | None = None) -> bool:
        g, t, q, off = handle.group, handle.topic, handle.queue_id, handle.queue_offset
        shard = handle.shard
        claim = delivery.but(s=SETTLING, n=secrets.token_hex(8), d=now_ms() + CLAIM_MS)
        if self.state.replace(g, t, q, off, delivery.n, claim, shard=shard,
                              only_if_due_at=due_at) != 1:
            if client_call:
                raise _expired(handle)
            return False
        try:
            answer = self.backend.send_back(g, delivery.m, level, topic=t, shard=shard,
                                            queue_id=q, queue_offset=off, reason=reason,
                                            consumer_id=client_id or delivery.c, token=token)
        except ClepsydraError:
            if client_call:  # give the delivery back to its handle: the client tries again
                self.state.replace(g, t, q, off, claim.n, delivery, shard=shard)
            raise
        done, commit, _ = self.state.settle(g, t, q, off, claim.n, shard=shard)
        if done == 1:
            self.commit(g, t, shard, q, commit, token)
        self._count(str(answer.get("outcome", "RETRY")).lower())
        logger.info("gateway sent back group=%s topic=%s shard=%d queue_id=%d queue_offset=%d "
                    "msg_id=%s level=%d outcome=%s", g, t, shard, q, off, delivery.m, level,
                    answer.get("outcome"))
        return True

    def commit(self, group: str, topic: str, shard: int, queue_id: int, offset: int,
               token: str | None) -> None:
        """SPEC C4: the group's progress, to the store by the next flush (every
        ``COMMIT_EVERY_S``, as the SDK commits every few seconds: a commit per ack would cost
        an HTTP call each). The offset a queue may commit never goes down; what is not flushed
        yet is in Redis (the deliveries under way), so a crash loses no progress a later
        settle of the queue would not commit again."""
        if offset < 0:
            return
        key = (group, topic, shard, queue_id)
        with self._dirty_lock:
            known = self._dirty.get(key)
            if known is None or known[0] < offset:
                self._dirty[key] = (offset, token)

    def flush_commits(self) -> int:
        """Commit what moved since the last flush; how many queues were committed."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, {}
        done = 0
        for (group, topic, shard, queue_id), (offset, token) in dirty.items():
            # DEC-gateway-shared-commits: the queue's commit point as the shared state has it
            # now, not only as this process last saw it - another gateway process (a rolling
            # upgrade runs two) may have settled past it and committed that meanwhile, and
            # the store takes the last commit it is sent, lower or not
            offset = max(offset, self.state.commit_point(group, topic, queue_id, shard=shard))
            while self.state.committed(group, topic, queue_id, shard=shard) != offset:
                try:
                    self.backend.commit(group, topic, shard, queue_id, offset, token)
                except ClepsydraError as exc:  # kept for the next flush
                    logger.warning("gateway commit failed group=%s topic=%s shard=%d "
                                   "queue_id=%d queue_offset=%d: %s", group, topic, shard,
                                   queue_id, offset, exc.message)
                    self.commit(group, topic, shard, queue_id, offset, token)
                    break
                self.state.set_committed(group, topic, queue_id, offset, shard=shard)
                done += 1
                # another process may have committed a higher point while this call was under
                # way, and been overtaken by it: the last to commit commits the newest point
                latest = self.state.commit_point(group, topic, queue_id, shard=shard)
                if latest <= offset:
                    break
                offset = latest
        return done

    # ---- the sweeper -------------------------------------------------------------------

    def start_sweeper(self) -> None:
        self._sweeper = threading.Thread(target=self._sweep_loop, name="gateway-sweeper",
                                         daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(5)
        try:
            self.flush_commits()
        except Exception:  # stopping: what is not committed is committed by a later settle
            logger.exception("gateway could not commit on stop")

    def _sweep_loop(self) -> None:
        next_flush = 0.0
        while not self._stop.wait(SWEEP_S):
            try:
                self.sweep()
                if time.monotonic() >= next_flush:
                    next_flush = time.monotonic() + COMMIT_EVERY_S
                    self.flush_commits()
            except Exception:  # a loop that must go on: Redis or a service away for now
                logger.exception("gateway sweep failed; trying again")

    def sweep(self) -> int:
        """Settle every delivery whose time ran out: renewed (a live PushConsumer's), visible
        again in place (FIFO), or sent back. How many it looked at."""
        now = now_ms()
        due = self.state.due(now)
        for member in due:
            group, topic, queue_id, offset, shard = parse_member(member)
            delivery = self.state.get(group, topic, queue_id, offset, shard=shard)
            if delivery is None:
                self.state.redis.zrem(naming.GATEWAY_DEADLINES_KEY, member)
                continue
            if delivery.d > now:
                continue
            try:
                self._expire(ReceiptHandle(group, topic, queue_id, offset, delivery.n, shard),
                             delivery, now)
            except ClepsydraError as exc:  # tried again once the claim runs out
                logger.warning("gateway could not settle group=%s topic=%s shard=%d "
                               "queue_id=%d queue_offset=%d msg_id=%s: %s", group, topic, shard,
                               queue_id, offset, delivery.m, exc.message)
        return len(due)

    def _expire(self, handle: ReceiptHandle, delivery: Delivery, now: int) -> None:
        g, t, q, off = handle.group, handle.topic, handle.queue_id, handle.queue_offset
        shard = handle.shard
        if (delivery.s == IN_FLIGHT and delivery.r and self.state.client_alive(delivery.c)
                and now - delivery.t < self.settings.consume_timeout_s * 1000):
            renewed = delivery.but(d=now + self.settings.renew_s * 1000)
            if self.state.replace(g, t, q, off, delivery.n, renewed, shard=shard,
                                  only_if_due_at=now) == 1:
                self._count("renewed")
            return
        level = RETRY_LEVEL
        if self.is_fifo(g):
            allowed = max_attempts(self.backend.group_settings(g, None).retry_max_times)
            if delivery.s == IN_FLIGHT and delivery.a < allowed:
                visible = delivery.but(s=VISIBLE, n=secrets.token_hex(8), d=0)
                if self.state.replace(g, t, q, off, delivery.n, visible, shard=shard,
                                      only_if_due_at=now) == 1:
                    self._count("visible")
                    self.wake()
                return
            level = DLQ_LEVEL
        self._settle_by_send_back(handle, delivery, level, "the invisible time ran out "
                                  "without an ack", delivery.c, None, client_call=False,
                                  due_at=now)
        self.wake()


@contextmanager
def _untraced() -> Iterator[None]:
    """Calls made in here carry no trace context (a held receive's polls of the store)."""
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def _one_per_group(messages: list[dict[str, Any]],
                   next_offset: int) -> tuple[list[dict[str, Any]], int]:
    """DEC-gateway-fifo: a FIFO batch is the queue's next messages up to the first whose
    message group is already in it (so a group has one message under way at a time)."""
    seen: set[str] = set()
    for index, message in enumerate(messages):
        group = message.get("properties", {}).get(P.SHARDING_KEY, "")
        if group and group in seen:
            return messages[:index], int(message["queueOffset"])
        if group:
            seen.add(group)
    return messages, next_offset


def _expired(handle: ReceiptHandle) -> GatewayError:
    return GatewayError(
        Status.INVALID_RECEIPT_HANDLE,
        f"the receipt handle has expired: message at {handle.topic} "
        f"{f'shard {handle.shard} ' if handle.shard else ''}queue {handle.queue_id} "
        f"offset {handle.queue_offset} is no longer held by it (acked already, its invisible "
        "time ran out, or a later change of invisible time gave a new handle)")
