"""The flush (SPEC P2, P3): the CommitLog fsync'd, then the indexes (given as
:class:`Indexes`: the dispatcher), then the checkpoint (:class:`Flusher`, and its thread).

With sync flush an append is acknowledged only once its bytes are fsync'd, and the appends
waiting meanwhile share one fsync (group commit, RocketMQ's ``GroupCommitService``): the writer
waits in :meth:`GroupCommit.wait`, the flush thread fsyncs whatever was appended and wakes them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from clepsydra_store.engine.log.checkpoint import Checkpoint, QueueRanges
from clepsydra_store.engine.log.commitlog import CommitLog

logger = logging.getLogger(__name__)

SYNC_FLUSH_TIMEOUT_S = 5.0
"""Longest wait of an append for its fsync; past it the append is reported not flushed."""


class GroupCommit:
    """The fsync waits of one CommitLog."""

    def __init__(self, commitlog: CommitLog, timeout_s: float = SYNC_FLUSH_TIMEOUT_S) -> None:
        self._commitlog = commitlog
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._stopped = False

    def wait(self, end: int) -> bool:
        """Wait until the CommitLog is fsync'd up to ``end`` (the flush thread woken for it);
        False when that did not happen within the timeout or the store stops first."""
        cl = self._commitlog
        deadline = time.monotonic() + self._timeout_s
        with self._cond:
            self._cond.notify_all()
            while cl.flushed_offset < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped:
                    return cl.flushed_offset >= end
                self._cond.wait(remaining)
        return True

    def wait_for_appends(self, until: float) -> None:
        """The flush thread (sync flush): wait until something was appended past the flushed
        offset, ``until`` (monotonic) passes or the store stops."""
        cl = self._commitlog
        with self._cond:
            while (not self._stopped and cl.max_offset <= cl.flushed_offset
                   and time.monotonic() < until):
                self._cond.wait(max(0.0, until - time.monotonic()))

    def flush_appended(self) -> None:
        """fsync what was appended and wake the appends waiting for it."""
        self._commitlog.flush()
        self.notify()

    def notify(self) -> None:
        """The flushed offset moved: wake the waits."""
        with self._cond:
            self._cond.notify_all()

    def stop(self) -> None:
        """The store stops: no wait blocks any more."""
        self._stopped = True
        self.notify()


@dataclass(slots=True)
class IndexPoint:
    """What a flush makes durable of the indexes, taken under the writer lock with the
    CommitLog offset it checkpoints (:meth:`Indexes.snapshot`)."""

    handed_over: dict[int, int]
    """level -> its handed-over mark (D9), for the checkpoint."""
    queues: QueueRanges
    """Each ConsumeQueue's range, for the checkpoint (recovery tells a queue that lost files)."""
    pending: object = None
    """The indexes' own: what they write at this flush, and do after its checkpoint."""


class Indexes(Protocol):
    """What the flush needs of the indexes (the dispatcher), in its order."""

    def snapshot(self) -> IndexPoint:
        """Under the writer lock, with the CommitLog offset the flush checkpoints."""

    def make_durable(self, point: IndexPoint) -> None:
        """After the CommitLog is fsync'd up to that offset: write and fsync the indexes."""

    def checkpointed(self, point: IndexPoint) -> None:
        """After the checkpoint is written: what may go only once it covers the point."""


class Flusher:
    """The store's flush (SPEC P2, P3): the CommitLog fsync'd, then the indexes, then the
    checkpoint naming what they hold, in that order, so recovery never trusts an index
    past the log; and the flush thread (async: every interval; sync: group commit as appends
    come, a checkpoint every interval)."""

    def __init__(self, commitlog: CommitLog, indexes: Indexes, writer_lock: threading.Lock,
                 checkpoint_path: Path, group_commit: GroupCommit, *, interval_ms: int,
                 sync: bool) -> None:
        self._commitlog = commitlog
        self._indexes = indexes
        self._writer_lock = writer_lock
        self._path = checkpoint_path
        self._group_commit = group_commit
        self._interval_s = interval_ms / 1000
        self._sync = sync
        self.lock = threading.Lock()
        """Held by a flush, and by retention while it deletes segments."""
        self._offset = -1
        self._forced = False

    def force(self) -> None:
        """The next flush writes a checkpoint even when nothing was appended (a topic deleted,
        segments removed)."""
        self._forced = True

    def flush(self) -> int:
        """fsync the CommitLog, the ConsumeQueues and the key index, then write the checkpoint;
        returns the checkpointed CommitLog offset."""
        with self.lock:
            with self._writer_lock:
                offset = self._commitlog.max_offset
                point = self._indexes.snapshot()
            self._group_commit.flush_appended()
            self._indexes.make_durable(point)  # only records fsync'd above
            if offset != self._offset or self._forced:
                self._forced = False
                Checkpoint(offset, point.handed_over, point.queues).save(self._path)
                self._offset = offset
            self._indexes.checkpointed(point)
            return offset

    def run(self, stop: threading.Event) -> None:
        """The flush thread, until ``stop`` is set."""
        interval_s = self._interval_s
        next_checkpoint = time.monotonic() + interval_s
        group_commit = self._group_commit
        while not stop.is_set():
            try:
                if self._sync:
                    group_commit.wait_for_appends(next_checkpoint)
                    group_commit.flush_appended()
                else:
                    stop.wait(interval_s)
                if time.monotonic() >= next_checkpoint or not self._sync:
                    next_checkpoint = time.monotonic() + interval_s
                    self.flush()
            except Exception:
                logger.exception("flush failed commitlog=%s; retrying",
                                 self._commitlog.directory)
                stop.wait(interval_s)
