"""MessageStore: the engine's one entry point (CommitLog + ConsumeQueues + dispatch + indexes).

INTERFACE SKELETON — the bodies are being written; the signatures and semantics below are the
contract the HTTP layer codes against. Thread-safe: one writer lock serialises appends; reads
run concurrently.
"""

from __future__ import annotations

from clepsydra_core.records import CommitLogRecord
from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.types import (
    CopyRequest,
    HandoverResult,
    PutRequest,
    PutResult,
    QueueRead,
    ScheduleEntries,
    TopicInfo,
)


class MessageStore:
    def __init__(self, config: EngineConfig) -> None:
        """Recover (P3) from config.data_dir and start background threads (flush, retention)."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush everything, write checkpoints, stop threads. Idempotent."""
        raise NotImplementedError

    # ---- topics ----------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int, *, system: bool = False) -> tuple[TopicInfo, bool]:
        """(info, created). Same queue count again -> created False. A different count ->
        ValidationError. ``system`` False refuses system names (Forbidden, S3)."""
        raise NotImplementedError

    def get_topic(self, name: str) -> TopicInfo:
        """TopicNotFound if absent. Includes SCHEDULE_TOPIC_XXXX (one queue per level)."""
        raise NotImplementedError

    def list_topics(self) -> list[TopicInfo]:
        raise NotImplementedError

    # ---- produce -----------------------------------------------------------------------------
    def put(self, request: PutRequest) -> PutResult:
        """Validate, then append one message (P1, L2, S1, S2, R10, P2). Raises ValidationError /
        TopicNotFound / NoPermission / Forbidden with nothing stored."""
        raise NotImplementedError

    def put_batch(self, requests: list[PutRequest]) -> list[PutResult]:
        """All validated first; one bad message refuses the whole batch, nothing stored.
        Appended with one write (and one fsync with sync flush)."""
        raise NotImplementedError

    def copy(self, requests: list[CopyRequest]) -> list[PutResult]:
        """Internal: copy stored messages into other topics (retry, DLQ, resend); topics other
        than ordinary ones (%RETRY%, %DLQ%) are created with 1 queue when missing."""
        raise NotImplementedError

    # ---- read --------------------------------------------------------------------------------
    def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   tags: frozenset[str] | None = None) -> QueueRead:
        """Pull from a queue (C3 tag filter by hash then by string). queue_offset below min
        reads from min; above max -> OffsetOutOfRange; bad queue_id -> OffsetOutOfRange."""
        raise NotImplementedError

    def get_by_commitlog_offset(self, commitlog_offset: int) -> CommitLogRecord:
        """MessageNotFound if no record starts there (or its segment is deleted)."""
        raise NotImplementedError

    def get_by_msg_id(self, msg_id: str) -> CommitLogRecord:
        raise NotImplementedError

    def get_by_key(self, topic: str, key: str, max_count: int = 32) -> list[CommitLogRecord]:
        """Messages of a topic whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``."""
        raise NotImplementedError

    # ---- schedule (scheduler's hand-over) ------------------------------------------------
    def schedule_entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries:
        """Deliver times of a level's schedule queue from queue_offset (D3, D8 done by caller)."""
        raise NotImplementedError

    def handover(self, level: int, from_offset: int, max_count: int,
                 now_ms: int | None = None) -> HandoverResult:
        """Deliver due entries [from_offset, from_offset+max_count) of a level into their real
        topics (D3 correction, D4 rebuild, D5 stop at first not due, D7 park, D9 skip entries
        at or below the level's handed-over mark). Durable and idempotent."""
        raise NotImplementedError

    # ---- consumer progress -------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        raise NotImplementedError

    def group_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        """{topic: {queue_id: offset}}."""
        raise NotImplementedError

    # ---- maintenance / observability -----------------------------------------------------
    def delete_expired_segments(self, now_ms: int | None = None) -> int:
        """P4: delete whole segments older than retention, never one holding an undelivered
        scheduled message; returns how many were deleted."""
        raise NotImplementedError

    def stats(self) -> dict[str, float]:
        """Counters and gauges for /metrics (puts, bytes, flushed offset, per-level backlog)."""
        raise NotImplementedError
