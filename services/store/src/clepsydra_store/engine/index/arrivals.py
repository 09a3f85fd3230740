"""Arrivals: pulls held until a message is appended to their queue (DEC-pull-hold).

A consumer's pull of a queue with nothing new answered at once, and the consumer pulled again
after a back-off: thousands of empty pulls a second on the store's one worker, and the back-off
was most of a message's lateness. A held pull (``waitMs``) registers here and waits; the
dispatcher calls :meth:`Arrivals.notify` once it has written a queue's new entries (live
appends only; nothing is held during recovery), which wakes the pulls held on that queue. In
the manner of RocketMQ's ``PullRequestHoldService`` (held requests per topic and queue, woken by
the message arrival listener), but each held pull waits in its own server thread, so their
number is bounded (:meth:`hold` refuses past ``limit``), and :meth:`close` wakes every held
pull and refuses new ones (graceful stop).

With no pull held, the dispatcher's cost is one test of an empty dict per queue written.
:func:`held_read` is the wait of one held pull.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from clepsydra_store.engine.types import Item, QueueRead

QueueKey = tuple[str, int]
"""(topic, queue_id)."""


class Held:
    """One held pull: set when its queue had an append, or when the store stops."""

    __slots__ = ("event", "key")

    def __init__(self, key: QueueKey) -> None:
        self.key = key
        self.event = threading.Event()

    def wait(self, timeout_s: float) -> bool:
        """True once woken (an append, or the stop), False when ``timeout_s`` ran out."""
        return self.event.wait(timeout_s)


class Arrivals:
    """The held pulls of one store, by queue."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting: dict[QueueKey, list[Held]] = {}
        """(topic, queue_id) -> its held pulls; read without the lock by the dispatcher (empty:
        nothing to wake)."""
        self.held = 0
        """Pulls held now."""
        self.closed = False

    def hold(self, topic: str, queue_id: int, limit: int) -> Held | None:
        """Register a pull of ``topic``/``queue_id`` that is about to wait, or None when
        ``limit`` pulls are held already or the store is stopping (the pull answers at once).
        The caller reads the queue again after this (an append between its first read and
        this call has not woken it) and calls :meth:`release` when it answers."""
        key = (topic, queue_id)
        with self._lock:
            if self.closed or self.held >= limit:
                return None
            held = Held(key)
            self.held += 1
            waiting = dict(self.waiting)  # copied: the dispatcher reads it without the lock
            waiting[key] = [*waiting.get(key, ()), held]
            self.waiting = waiting
        return held

    def release(self, held: Held) -> None:
        """The pull answered: no longer held."""
        with self._lock:
            listed = self.waiting.get(held.key, [])
            if held not in listed:
                return
            self.held -= 1
            waiting = dict(self.waiting)
            rest = [h for h in listed if h is not held]
            if rest:
                waiting[held.key] = rest
            else:
                del waiting[held.key]
            self.waiting = waiting

    def notify(self, topic: str, queue_id: int) -> None:
        """Entries were appended to ``topic``/``queue_id``: wake the pulls held on it."""
        for held in self.waiting.get((topic, queue_id), ()):
            held.event.set()

    def close(self) -> None:
        """The store stops: wake every held pull and hold no more."""
        with self._lock:
            self.closed = True
            waiting = self.waiting
        for held_pulls in waiting.values():
            for held in held_pulls:
                held.event.set()


def nothing_yet(read: QueueRead[Any]) -> bool:
    """No message answered and none left to scan: only an append can change the page."""
    return not read.messages and read.next_offset >= read.max_offset


def held_read(arrivals: Arrivals, read_from: Callable[[int], QueueRead[Item]],
              read: QueueRead[Item], topic: str, queue_id: int, limit: int, wait_ms: int
              ) -> QueueRead[Item]:
    """The pull hold: wait for an append to the queue (or the end of ``wait_ms``, or the
    store's stop) and read again from where ``read`` ended (``read_from(queue_offset)``);
    ``read`` itself when ``limit`` pulls are held already. An append of messages the pull's
    tags do not match moves the read on and the wait goes on."""
    held = arrivals.hold(topic, queue_id, limit)
    if held is None:
        return read
    try:
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            held.event.clear()  # before the read: an append after it wakes the wait below
            read = read_from(read.next_offset)
            if not nothing_yet(read) or arrivals.closed:
                return read
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not held.wait(remaining):
                return read
    finally:
        arrivals.release(held)
