"""The push consumer's two thread pools.

- :class:`ScheduledPool`: a few threads running calls at given times, as Java's
  ``ScheduledThreadPoolExecutor`` (the pull loops, heartbeats, lock renewals, offset commits,
  the hand-over graces). A delayed call is an entry in a heap, not a sleeping thread, so a
  consumer with many queues needs few threads.
- :class:`WorkerPool`: threads running submitted calls in order: the consume pool.

Neither has anything to do with timer messages (``deliverAt``, SPEC T1): these are the
consumer's own threads.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

logger = logging.getLogger(__name__)


class ScheduledPool:
    """``threads`` threads running the calls given to :meth:`schedule` once each is due, the
    earliest first; a call that raises is logged and not run again."""

    def __init__(self, threads: int, name: str) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def schedule(self, fn: Callable[[], None], delay_s: float = 0.0) -> None:
        due = time.monotonic() + max(delay_s, 0.0)
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (due, next(self._seq), fn))
            self._cond.notify()

    def _next(self) -> Callable[[], None] | None:
        with self._cond:
            while True:
                if self._stopped:
                    return None
                if self._heap:
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        return heapq.heappop(self._heap)[2]
                    self._cond.wait(wait)
                else:
                    self._cond.wait()

    def _run(self) -> None:
        while True:
            fn = self._next()
            if fn is None:
                return
            try:
                fn()
            except Exception:
                logger.exception("scheduled call %s failed; it is not run again", fn)

    def stop(self, timeout_s: float = 5.0,
             skip: Collection[threading.Thread] = ()) -> None:
        """Run nothing more; wait (bounded) for the running calls but those of ``skip`` (a
        pull held by the store, which answers nothing after the stop: pulling.py)."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
        current = threading.current_thread()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread is not current and thread not in skip and thread.is_alive():
                thread.join(max(deadline - time.monotonic(), 0.0))


class WorkerPool:
    """Threads running submitted calls in order of submission: the consume pool. Lighter than
    ``ThreadPoolExecutor`` (no Future per call), which matters at one call per message."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._stopped = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self._stopped:
            raise RuntimeError("the pool is shut down")
        self._queue.put((fn, args))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopped:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:
                logger.exception("pool task %s failed", fn)

    def shutdown(self, wait: bool = False, timeout_s: float = 5.0) -> None:
        """Stop taking calls; calls not started are dropped."""
        self._stopped = True
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            deadline = time.monotonic() + timeout_s
            current = threading.current_thread()
            for thread in self._threads:
                if thread is not current:
                    thread.join(max(deadline - time.monotonic(), 0.0))
