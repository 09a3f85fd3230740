"""ProcessQueue: the messages of one owned queue between the pull loop and the consume pool.

It bounds what is pulled ahead (count, and span between the oldest unfinished and the newest
pulled offset), knows which messages are being consumed since when (consume timeout, R13),
keeps the orderly buffer (R12) and the C4 tracker that gives the offset to commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from clepsydra_client.consumer.offsets import OffsetTracker
from clepsydra_client.message import Message, MessageQueue


class ProcessQueue:
    def __init__(self, queue: MessageQueue, start_offset: int) -> None:
        self.queue = queue
        self.tracker = OffsetTracker(start_offset)
        self._lock = threading.Lock()
        self._messages: dict[int, Message] = {}
        self._started: dict[int, float] = {}
        self._order_buffer: list[int] = []
        """Orderly: offsets pulled and not yet taken for consumption, ascending."""
        self._bytes = 0
        self.dropped = False
        self.drop_final = False
        """Set once the dropped queue's last offset was committed: later outcomes are ignored."""
        self.orderly_lock = threading.Lock()
        """Orderly: held by the one thread consuming this queue, while it consumes."""
        self.orderly_running = False
        self.suspended_until = 0.0
        """Orderly: ``time.monotonic()`` before which the queue is not consumed (R12)."""
        self.locking = False
        """Orderly in clustering mode: consumed only while the store's queue lock is held
        (DEC-orderly-queue-locks)."""
        self.lock_valid_until = 0.0
        """``time.monotonic()`` until which the queue lock may be trusted (renewals move it)."""
        self.last_pull_s = time.monotonic()
        self.last_consume_s = time.monotonic()

    # ---- pulled messages -----------------------------------------------------------------

    def put(self, messages: Iterable[Message], *, orderly: bool = False) -> None:
        with self._lock:
            fresh = [m for m in messages if m.queue_offset not in self._messages]
            for m in fresh:
                self._messages[m.queue_offset] = m
                self._bytes += len(m.body)
            if orderly:
                self._order_buffer.extend(m.queue_offset for m in fresh)
                self._order_buffer.sort()
        self.tracker.add(m.queue_offset for m in fresh)

    def advance(self, next_offset: int) -> None:
        self.tracker.advance(next_offset)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._messages)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def span(self) -> int:
        return self.tracker.span()

    # ---- consumption ---------------------------------------------------------------------

    def begin(self, messages: list[Message]) -> list[Message]:
        """Mark messages as being consumed now; those already finished (timed out and sent
        back, or the queue dropped) are left out."""
        now = time.monotonic()
        with self._lock:
            live = [m for m in messages if m.queue_offset in self._messages]
            for m in live:
                self._started[m.queue_offset] = now
        self.last_consume_s = now
        return live

    def finish(self, offsets: Iterable[int]) -> list[int]:
        """Messages completed (success, sent back or dead-lettered): those that were still
        pending. A message already finished (e.g. by the consume timeout) is not counted twice."""
        done = []
        with self._lock:
            for offset in offsets:
                m = self._messages.pop(offset, None)
                self._started.pop(offset, None)
                if m is not None:
                    self._bytes -= len(m.body)
                    done.append(offset)
        if done:
            self.tracker.finish_many(done)
        return done

    def release(self, offsets: Iterable[int]) -> None:
        """Consumption stopped without an outcome (to be retried locally): not in flight."""
        with self._lock:
            for offset in offsets:
                self._started.pop(offset, None)

    def is_pending(self, offset: int) -> bool:
        with self._lock:
            return offset in self._messages

    def expired(self, timeout_s: float, now: float | None = None) -> list[Message]:
        """Messages being consumed for longer than ``timeout_s`` (R13)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return [self._messages[o] for o, t in sorted(self._started.items())
                    if now - t > timeout_s and o in self._messages]

    def in_flight(self) -> int:
        with self._lock:
            return len(self._started)

    def committable(self) -> int:
        return self.tracker.committable()

    # ---- orderly ---------------------------------------------------------------------------

    def lock_held(self, now: float | None = None) -> bool:
        """True when the queue may be consumed: no lock needed, or the lock is held."""
        if not self.locking:
            return True
        return (time.monotonic() if now is None else now) < self.lock_valid_until

    def take_ordered(self, max_count: int) -> list[Message]:
        """Orderly: the next messages in offset order, marked as being consumed."""
        with self._lock:
            offsets = self._order_buffer[:max_count]
            del self._order_buffer[:max_count]
            return [self._messages[o] for o in offsets if o in self._messages]

    def put_back_ordered(self, messages: list[Message]) -> None:
        """Orderly: failed messages go back to the front, to be consumed again first."""
        with self._lock:
            for m in messages:
                self._started.pop(m.queue_offset, None)
                if m.queue_offset in self._messages:
                    self._messages[m.queue_offset] = m  # carries the new reconsume count
            self._order_buffer = sorted(
                {m.queue_offset for m in messages if m.queue_offset in self._messages}
                | set(self._order_buffer))

    def ordered_waiting(self) -> int:
        with self._lock:
            return len(self._order_buffer)

    def clear_unstarted(self) -> None:
        """On drop: messages not yet handed to the listener are forgotten (the next owner
        pulls them again from the committed offset)."""
        with self._lock:
            self._order_buffer.clear()
