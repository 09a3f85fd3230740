"""Asynchronous sends with automatic batching: ``Producer.send_async`` returns a
future at once; a sender thread gathers what was accepted into batch requests, per topic, of at
most ``batch_messages`` messages and ``batch_bytes`` bytes, waiting at most ``linger_ms`` for a
batch to fill.

Each future gets its own result or error. A batch the store refuses as a whole with a 4xx (it
checks every message before writing any, so nothing was stored) is sent again one message at a
time, so only the messages at fault fail. A batch whose answer is lost (the connection broke, a
5xx, a timeout) fails all its futures with that error: the store may or may not have kept them,
and resending is the application's decision (at least once, never silently twice).

``flush()`` returns once every message accepted before it has its outcome; ``close()`` flushes,
then stops the threads; nothing accepted is ever dropped. A full buffer (``max_pending``
messages waiting) makes ``send_async`` wait for room instead of growing without bound.

A message is checked when it is accepted; its JSON value is built on the sender thread and the
batch request encoded in one ``orjson.dumps`` (encoding each message to its own bytes when
accepted costs ten times more: each is a fresh allocation kept until its batch goes).
Accepting is cheap on purpose (the caller's thread and the sender threads share one
GIL, and the garbage collector's full passes follow every object that lives long enough): a
waiting message is a flat tuple of plain values (:data:`Message`), which the collector stops
following at its first pass, and its future (``futures.SendFuture``, one object) sits beside
it; no span object for a message whose span is not recorded; ``submit`` wakes the
sender threads only when a topic's queue starts (a new linger to wait for) or fills a batch,
and the accepting thread lets them run every 64 messages instead of after the interpreter's
5 ms switch interval.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from clepsydra_client.futures import Answer, SendFuture, complete
from clepsydra_core.errors import ClepsydraError

LINGER_MS = 5.0
BATCH_MESSAGES = 500
BATCH_BYTES = 1 << 20
MAX_PENDING = 100_000
YIELD_MASK = 63
"""The accepting thread lets the senders run every 64 messages (see ``Batcher.submit``)."""

Message = tuple[Any, ...]
"""An accepted message as the producer keeps it until its batch goes: one flat tuple of plain
values (text, numbers, None), so the garbage collector stops following it at its first pass;
the producer turns it into the request's JSON when the batch is sent."""
SendBatch = Callable[[str, list[Message]], list[Answer]]
"""Sends one batch for a topic; the answers in order, or raises."""
SendOne = Callable[[str, Message], Answer]


class _Queue:
    """A topic's accepted messages, their sizes and their futures, in three queues side by
    side: a waiting message holds no reference the collector must follow, and no pair is made
    per message (a tuple the collector follows until its first pass)."""

    __slots__ = ("first_at", "futures", "messages", "sizes")

    def __init__(self) -> None:
        self.messages: deque[Message] = deque()
        self.sizes: deque[int] = deque()
        self.futures: deque[SendFuture] = deque()
        self.first_at = 0.0


class Batcher:
    """The buffer of accepted messages and the sender threads that drain it."""

    def __init__(self, send_batch: SendBatch, send_one: SendOne, *,
                 linger_ms: float = LINGER_MS, batch_messages: int = BATCH_MESSAGES,
                 batch_bytes: int = BATCH_BYTES, max_pending: int = MAX_PENDING,
                 senders: int = 2) -> None:
        if linger_ms < 0 or batch_messages < 1 or batch_bytes < 1 or max_pending < 1:
            raise ValueError("linger_ms >= 0, batch_messages, batch_bytes, max_pending >= 1")
        self._send_batch = send_batch
        self._send_one = send_one
        self.linger_s = linger_ms / 1000.0
        self.batch_messages = batch_messages
        self.batch_bytes = batch_bytes
        self.max_pending = max_pending
        self._queues: dict[str, _Queue] = {}
        self._pending = 0  # accepted, outcome not yet set
        self._accepted = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        """Waits on ``_lock``; ``submit`` takes the lock itself (``Condition.__enter__`` is
        a Python call per message)."""
        self._closed = False
        self._flushing = False  # a flush waits: send what is queued without lingering
        self._threads = [threading.Thread(target=self._run, name=f"clepsydra-batcher-{i}",
                                          daemon=True) for i in range(senders)]
        for thread in self._threads:
            thread.start()

    def submit(self, topic: str, message: Message, size: int, future: SendFuture) -> None:
        """Accept ``message`` (about ``size`` bytes in a request) for ``topic``; ``future``
        gets its outcome."""
        with self._lock:
            while self._pending >= self.max_pending and not self._closed:
                self._cond.wait()
            if self._closed:
                raise ClepsydraError("the producer is closed")
            queue = self._queues.get(topic)
            if queue is None:
                queue = self._queues[topic] = _Queue()
            queue.messages.append(message)
            queue.sizes.append(size)
            queue.futures.append(future)
            self._pending += 1
            # a sender needs waking only for a new linger to wait for, or a full batch
            waiting = len(queue.futures)
            if waiting == 1:
                queue.first_at = time.monotonic()
                self._cond.notify_all()
            elif waiting == self.batch_messages:
                self._cond.notify_all()
            self._accepted += 1
            if self._accepted & YIELD_MASK:
                return
        time.sleep(0)  # let a sender thread waiting for the GIL run now

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every message accepted so far has its outcome; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            if self._pending:
                self._flushing = True
                self._cond.notify_all()
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(10)

    def _take(self) -> tuple[str, list[Message], list[SendFuture]] | None:
        """The next batch to send (waiting for one); None once closed and empty."""
        with self._cond:
            while True:
                now = time.monotonic()
                wait_s: float | None = None
                for topic, queue in self._queues.items():
                    if not queue.futures:
                        continue
                    due = queue.first_at + self.linger_s
                    if (len(queue.futures) >= self.batch_messages or now >= due
                            or self._closed or self._flushing):
                        return (topic, *self._cut(queue))
                    wait_s = due - now if wait_s is None else min(wait_s, due - now)
                if self._closed and not self._pending:
                    return None
                self._cond.wait(wait_s)

    def _cut(self, queue: _Queue) -> tuple[list[Message], list[SendFuture]]:
        messages: list[Message] = []
        futures: list[SendFuture] = []
        waiting, sizes, size = queue.messages, queue.sizes, 0
        while waiting and len(messages) < self.batch_messages:
            message_size = sizes[0]
            if messages and size + message_size > self.batch_bytes:
                break
            sizes.popleft()
            messages.append(waiting.popleft())
            futures.append(queue.futures.popleft())
            size += message_size
        if waiting:
            queue.first_at = time.monotonic() - self.linger_s  # the rest is due now
        return messages, futures

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            topic, messages, futures = taken
            self._deliver(topic, messages, futures)
            with self._cond:
                self._pending -= len(futures)
                if not self._pending:
                    self._flushing = False
                self._cond.notify_all()

    def _deliver(self, topic: str, messages: list[Message], futures: list[SendFuture]) -> None:
        try:
            results = self._send_batch(topic, messages)
        except ClepsydraError as exc:
            if 400 <= exc.http_status < 500 and len(messages) > 1:
                for message, future in zip(messages, futures, strict=True):
                    self._one(topic, message, future)  # nothing was stored: each on its own
                return
            _fail(futures, exc)
            return
        except BaseException as exc:
            _fail(futures, exc)
            return
        if len(results) != len(messages):
            _fail(futures, ClepsydraError(f"the store answered {len(results)} results for a "
                                          f"batch of {len(messages)}"))
            return
        complete(futures, results)

    def _one(self, topic: str, message: Message, future: SendFuture) -> None:
        try:
            value = self._send_one(topic, message)
        except BaseException as exc:
            _fail([future], exc)
            return
        complete([future], [value])


def _fail(futures: list[SendFuture], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)
