"""Consumer progress: the C4 tracker of one queue, and where committed offsets are kept.

A committed offset is the queue offset consumption resumes from (the next one to consume).
SPEC C4: it never passes a message that has not completed (success, sent back or
dead-lettered); with a batch in flight it is the smallest unfinished offset.

Offset stores: :class:`RemoteOffsetStore` (the store's group offsets, clustering),
:class:`LocalOffsetStore` (a JSON file per consumer, broadcasting: C2 progress per consumer)
and :class:`MemoryOffsetStore` (tests, the CLI's tail).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from clepsydra_client.message import MessageQueue
from clepsydra_client.routing import Router
from clepsydra_core.errors import ClepsydraError, Unavailable, ValidationError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.groups import GroupOffsets, OffsetCommit

logger = logging.getLogger(__name__)


class OffsetTracker:
    """Offsets of one queue pulled but not finished. Thread-safe.

    ``start(100)``, ``add([100, 101, 102])``, ``finish(101)`` -> ``committable()`` is 100;
    ``finish(100)`` -> 102; ``finish(102)`` -> 103."""

    def __init__(self, start_offset: int) -> None:
        self._lock = threading.Lock()
        self._pending: set[int] = set()
        self._heap: list[int] = []
        self._next = start_offset
        """One past the highest offset pulled (or skipped by a filtered pull)."""

    def add(self, offsets: Iterable[int]) -> None:
        with self._lock:
            for offset in offsets:
                if offset >= self._next:
                    self._next = offset + 1
                if offset not in self._pending:
                    self._pending.add(offset)
                    heapq.heappush(self._heap, offset)

    def advance(self, next_offset: int) -> None:
        """A pull ended at ``next_offset`` (messages filtered out by tags complete at once)."""
        with self._lock:
            if next_offset > self._next:
                self._next = next_offset

    def finish(self, offset: int) -> bool:
        """Mark one offset completed; False when it was not pending (already finished)."""
        return self.finish_many((offset,)) == 1

    def finish_many(self, offsets: Iterable[int]) -> int:
        """Mark offsets completed; how many were pending."""
        done = 0
        with self._lock:
            for offset in offsets:
                if offset in self._pending:
                    self._pending.discard(offset)
                    done += 1
            while self._heap and self._heap[0] not in self._pending:
                heapq.heappop(self._heap)
        return done

    def is_pending(self, offset: int) -> bool:
        with self._lock:
            return offset in self._pending

    def committable(self) -> int:
        """Smallest unfinished offset, or one past the last pulled when nothing is in flight."""
        with self._lock:
            return self._heap[0] if self._heap else self._next

    @property
    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def next_offset(self) -> int:
        with self._lock:
            return self._next

    def span(self) -> int:
        """Distance between the oldest unfinished and the newest pulled offset."""
        with self._lock:
            return (self._next - 1 - self._heap[0]) if self._heap else 0


class OffsetStore(Protocol):
    def read(self, queue: MessageQueue) -> int | None:
        """The committed offset, None when the group has none for this queue."""

    def update(self, queue: MessageQueue, offset: int) -> None:
        """Remember an offset to commit at the next :meth:`persist`."""

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Commit the remembered offsets of these queues."""

    def forget(self, queue: MessageQueue) -> None: ...


class MemoryOffsetStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offsets: dict[MessageQueue, int] = {}

    def read(self, queue: MessageQueue) -> int | None:
        with self._lock:
            return self.offsets.get(queue)

    def update(self, queue: MessageQueue, offset: int) -> None:
        with self._lock:
            self.offsets[queue] = offset

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        return None

    def forget(self, queue: MessageQueue) -> None:
        with self._lock:
            self.offsets.pop(queue, None)


def queue_offsets(answer: GroupOffsets, shard: int = 0) -> dict[MessageQueue, int]:
    """A group's committed offsets on one store shard (the store's ``GET
    /v1/groups/{g}/offsets`` answer, read with its wire type) by queue; a broadcasting
    consumer's file keeps the other shards' in ``shards``."""
    out = {MessageQueue(topic, int(queue_id), shard): offset
           for topic, queues in answer.offsets.items()
           for queue_id, offset in queues.items()}
    for other, topics in (answer.shards or {}).items():
        out.update({MessageQueue(topic, int(queue_id), int(other)): offset
                    for topic, queues in topics.items() for queue_id, offset in queues.items()})
    return out


class RemoteOffsetStore:
    """The group's committed offsets in the store (``PUT /v1/groups/{g}/offsets``), each
    queue's on its own shard (``router``: DEC-store-shards). Only changed offsets are sent."""

    def __init__(self, http: HttpClient, group: str, router: Router | None = None) -> None:
        self.http = http
        self.group = group
        self.router = router
        self._lock = threading.Lock()
        self._local: dict[MessageQueue, int] = {}
        self._sent: dict[MessageQueue, int] = {}

    def _client(self, shard: int) -> HttpClient:
        if self.router is None or (shard == 0 and not self.router.clustered):
            return self.http
        return self.router.client(shard)

    def _shards(self) -> list[int]:
        return self.router.shards.ids() if self.router is not None else [0]

    def fetch_shard(self, topic: str, shard: int) -> dict[MessageQueue, int]:
        http = self._client(shard)
        answer = read_answer(GroupOffsets, http.get(
            http.path("/v1/groups/{}/offsets", self.group), {"topic": topic}), "offsets")
        return {q: o for q, o in queue_offsets(answer, shard).items() if q.topic == topic}

    def fetch(self, topic: str) -> dict[MessageQueue, int]:
        """The topic's committed offsets on every shard (a shard that does not answer: the
        error)."""
        out: dict[MessageQueue, int] = {}
        for shard in self._shards():
            out.update(self.fetch_shard(topic, shard))
        return out

    def read(self, queue: MessageQueue) -> int | None:
        offset = self.fetch_shard(queue.topic, queue.shard).get(queue)
        if offset is not None:
            with self._lock:
                self._sent[queue] = offset
        return offset

    def update(self, queue: MessageQueue, offset: int) -> None:
        with self._lock:
            self._local[queue] = offset

    def commit(self, queue: MessageQueue, offset: int) -> None:
        http = self._client(queue.shard)
        http.put(http.path("/v1/groups/{}/offsets", self.group),
                 OffsetCommit(queue.topic, queue.queue_id, offset).to_json())
        with self._lock:
            self._sent[queue] = offset

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Commit each queue's changed offset; a queue whose commit fails is logged and
        tried again next time (the others still go)."""
        failed: ClepsydraError | None = None
        for queue in queues:
            with self._lock:
                offset = self._local.get(queue)
                if offset is None or self._sent.get(queue) == offset:
                    continue
            try:
                self.commit(queue, offset)
            except ClepsydraError as exc:
                logger.warning("offset commit failed group=%s queue=%s offset=%d error=%s",
                               self.group, queue, offset, exc)
                failed = exc
                if isinstance(exc, Unavailable) and self.router is None:
                    break  # the store is down: the next period tries again
        if failed is not None:
            raise failed

    def forget(self, queue: MessageQueue) -> None:
        with self._lock:
            self._local.pop(queue, None)
            self._sent.pop(queue, None)


class LocalOffsetStore:
    """Progress of one broadcasting consumer in a JSON file (SPEC C2: per consumer), written
    atomically (temporary file, then rename), in the shape of the store's group offsets
    (:class:`GroupOffsets`; a file without ``group``, as older clients wrote it, reads too)."""

    def __init__(self, path: Path, group: str = "") -> None:
        self.path = path
        self.group = group
        self._lock = threading.Lock()
        self._offsets: dict[MessageQueue, int] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            logger.warning("offsets file %s is not JSON: starting without progress", self.path)
            return
        try:
            saved = GroupOffsets.from_json({"group": self.group, **raw}
                                           if isinstance(raw, dict) else raw, what=str(self.path))
        except ValidationError as exc:
            logger.warning("offsets file %s is not a group's offsets (%s): starting without "
                           "progress", self.path, exc.message)
            return
        self._offsets = queue_offsets(saved)

    def read(self, queue: MessageQueue) -> int | None:
        with self._lock:
            return self._offsets.get(queue)

    def update(self, queue: MessageQueue, offset: int) -> None:
        with self._lock:
            self._offsets[queue] = offset

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        with self._lock:
            data: dict[str, dict[str, int]] = {}
            others: dict[str, dict[str, dict[str, int]]] = {}
            for q, offset in sorted(self._offsets.items()):
                where = data if q.shard == 0 else others.setdefault(str(q.shard), {})
                where.setdefault(q.topic, {})[str(q.queue_id)] = offset
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(GroupOffsets(self.group, data, others or None).to_json(),
                                  indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def forget(self, queue: MessageQueue) -> None:
        return None
