"""Asynchronous sends with automatic batching (issue 14): ``Producer.send_async`` returns a
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

A message's JSON value is built once, when it is accepted, and a batch request is encoded in
one ``orjson.dumps`` on the sender thread (encoding each message to its own bytes costs ten
times more: each is a fresh allocation kept until its batch goes). Accepting is cheap on
purpose (issue 14: the caller's thread and the sender threads share one GIL): no span object
for a message whose span is not recorded, a future that is one object
(``futures.LeanFuture``), and ``submit`` wakes the sender threads only when a topic's queue
starts (a new linger to wait for) or fills a batch.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from clepsydra_client.message import SendResult
from clepsydra_core.errors import ClepsydraError

LINGER_MS = 5.0
BATCH_MESSAGES = 500
BATCH_BYTES = 1 << 20
MAX_PENDING = 100_000
YIELD_MASK = 63
"""The accepting thread lets the senders run every 64 messages (see ``Batcher.submit``)."""

SendBatch = Callable[[str, list["Pending"]], list[SendResult]]
"""Sends one batch for a topic; the results in order, or raises."""


@dataclass(slots=True)
class Pending:
    """One accepted message: its request body (a :class:`ProduceMessage`'s JSON, built when
    accepted), its size in bytes (about), its ``UNIQ_KEY`` and its future."""

    request: dict[str, object]
    size: int
    uniq_key: str
    future: Future[SendResult]


class Batcher:
    """The buffer of accepted messages and the sender threads that drain it."""

    def __init__(self, send_batch: SendBatch, send_one: Callable[[str, Pending], SendResult],
                 *, linger_ms: float = LINGER_MS, batch_messages: int = BATCH_MESSAGES,
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
        self._queues: dict[str, deque[Pending]] = {}
        self._first_at: dict[str, float] = {}
        self._pending = 0  # accepted, outcome not yet set
        self._accepted = 0
        self._cond = threading.Condition()
        self._closed = False
        self._flushing = False  # a flush waits: send what is queued without lingering
        self._threads = [threading.Thread(target=self._run, name=f"clepsydra-batcher-{i}",
                                          daemon=True) for i in range(senders)]
        for thread in self._threads:
            thread.start()

    def submit(self, topic: str, item: Pending) -> None:
        with self._cond:
            while self._pending >= self.max_pending and not self._closed:
                self._cond.wait()
            if self._closed:
                raise ClepsydraError("the producer is closed")
            queue = self._queues.get(topic)
            if queue is None:
                queue = self._queues[topic] = deque()
            queue.append(item)
            self._pending += 1
            # a sender needs waking only for a new linger to wait for, or a full batch
            if len(queue) == 1:
                self._first_at[topic] = time.monotonic()
                self._cond.notify_all()
            elif len(queue) == self.batch_messages:
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

    def _take(self) -> tuple[str, list[Pending]] | None:
        """The next batch to send (waiting for one); None once closed and empty."""
        with self._cond:
            while True:
                now = time.monotonic()
                wait_s: float | None = None
                for topic, queue in self._queues.items():
                    if not queue:
                        continue
                    due = self._first_at[topic] + self.linger_s
                    if (len(queue) >= self.batch_messages or now >= due or self._closed
                            or self._flushing):
                        return topic, self._cut(topic, queue)
                    wait_s = due - now if wait_s is None else min(wait_s, due - now)
                if self._closed and not self._pending:
                    return None
                self._cond.wait(wait_s)

    def _cut(self, topic: str, queue: deque[Pending]) -> list[Pending]:
        batch: list[Pending] = []
        size = 0
        while queue and len(batch) < self.batch_messages:
            if batch and size + queue[0].size > self.batch_bytes:
                break
            item = queue.popleft()
            batch.append(item)
            size += item.size
        if queue:
            self._first_at[topic] = time.monotonic() - self.linger_s  # the rest is due now
        return batch

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            topic, batch = taken
            self._deliver(topic, batch)
            with self._cond:
                self._pending -= len(batch)
                if not self._pending:
                    self._flushing = False
                self._cond.notify_all()

    def _deliver(self, topic: str, batch: list[Pending]) -> None:
        try:
            results = self._send_batch(topic, batch)
        except ClepsydraError as exc:
            if 400 <= exc.http_status < 500 and len(batch) > 1:
                for item in batch:  # nothing of it was stored: each on its own
                    self._one(topic, item)
                return
            _fail(batch, exc)
            return
        except BaseException as exc:
            _fail(batch, exc)
            return
        if len(results) != len(batch):
            _fail(batch, ClepsydraError(f"the store answered {len(results)} results for a "
                                        f"batch of {len(batch)}"))
            return
        for item, result in zip(batch, results, strict=True):
            item.future.set_result(result)

    def _one(self, topic: str, item: Pending) -> None:
        try:
            item.future.set_result(self._send_one(topic, item))
        except BaseException as exc:
            item.future.set_exception(exc)


def _fail(batch: list[Pending], exc: BaseException) -> None:
    for item in batch:
        item.future.set_exception(exc)
