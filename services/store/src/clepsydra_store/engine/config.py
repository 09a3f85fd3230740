"""EngineConfig: what the storage engine needs, with no environment reading. A base module:
every layer of the engine may import it, and it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.levels import DelayLevels

TIMER_MAX_DELAY_VAR = "CLEPSYDRA_TIMER_MAX_DELAY"
"""The setting that caps a timer's delay (named in the 400 past it, SPEC T1)."""
DEFAULT_TIMER_MAX_DELAY_MS = 365 * 86_400_000
DEFAULT_TIMER_HANDOVER_GAP_MS = 3
DEFAULT_TIMER_STAGE_AHEAD_MS = 2_000
"""DEC-timer-staging: long enough to make 100,000 copies before they fall due."""
DEFAULT_KEY_INDEX_ENTRIES_PER_FILE = 2_000_000
"""Entries of one key index file by default (40 MB of entries, 2 MB of slots)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    data_dir: Path
    consumequeue_dir: Path | None = None
    """Where the ConsumeQueue files live; None: ``data_dir/consumequeue``. A separate path lets
    a cluster put the ConsumeQueue on its own volume, apart from the CommitLog."""
    store_host: str = "127.0.0.1:8081"
    shard_id: int = 0
    """The store shard this engine is: carried in every offsetMsgId it makes
    (DEC-shard-in-msgid; 0 leaves the ids as they were before shards)."""
    delay_levels: DelayLevels = field(default_factory=DelayLevels.default)
    segment_size_bytes: int = 1 << 30
    cq_entries_per_file: int = 300_000
    key_index_entries_per_file: int = DEFAULT_KEY_INDEX_ENTRIES_PER_FILE
    """Entries of one key index file (DEC-key-index-on-disk); its slots are a quarter of that."""
    flush: str = "async"  # "async" | "sync"
    flush_interval_ms: int = 500
    retention_hours: float = 72
    max_body_bytes: int = 4 * 1024 * 1024
    writable: bool = True
    disk_max_ratio: float = 0.90
    """Used share of the disk past which client message writes are refused (507, 12.8)."""
    disk_warn_ratio: float = 0.85
    """Used share of the disk past which the store warns and retention runs every second."""
    disk_capacity_bytes: int = 0
    """0: the ratio is the volume's; > 0: the store's own files over this many bytes."""
    timer_max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS
    """Longest delay a timer message may ask for (``CLEPSYDRA_TIMER_MAX_DELAY``, SPEC T1)."""
    timer_handover_gap_ms: int = DEFAULT_TIMER_HANDOVER_GAP_MS
    """Least time between two hand-overs that return timers
    (``CLEPSYDRA_STORE_TIMER_HANDOVER_GAP_MS``, DEC-timer-handover-gap): while timers fall due every
    millisecond, each scheduler call takes what fell due in that time instead of one
    millisecond's worth (a call costs the one writer ~0.4 ms of CPU); a timer after a quiet
    spell is handed over at its millisecond. 0: every millisecond. Adds at most this much
    lateness (SPEC T1: within 100 ms), never earliness."""
    timer_stage_ahead_ms: int = DEFAULT_TIMER_STAGE_AHEAD_MS
    """How long before timers fall due their hand-over copies are made, while the scheduler's
    call waits (``CLEPSYDRA_STORE_TIMER_STAGE_AHEAD_MS``, DEC-timer-staging): at the due time
    only the append is left. 0: copies are made at the due time."""
    retry_topic_queues: int = 1
    """Queues of a %RETRY% topic created by a plain send (R9 fallback); the retry service
    creates it with the group's retryQueueNums first when it can (R3)."""


@dataclass(frozen=True, slots=True)
class StoreDirs:
    """Where the store's files are, under ``root`` (``EngineConfig.data_dir``)."""

    root: Path
    consumequeue_root: Path | None = None
    """The ConsumeQueue folder when it is not ``root/consumequeue`` (its own volume)."""

    @classmethod
    def of(cls, config: EngineConfig) -> StoreDirs:
        return cls(config.data_dir, config.consumequeue_dir)

    @property
    def commitlog(self) -> Path:
        return self.root / naming.COMMITLOG_DIR

    @property
    def consumequeue(self) -> Path:
        if self.consumequeue_root is not None:
            return self.consumequeue_root
        return self.root / naming.CONSUMEQUEUE_DIR

    @property
    def index(self) -> Path:
        return self.root / naming.INDEX_DIR

    @property
    def config(self) -> Path:
        return self.root / naming.CONFIG_DIR

    @property
    def checkpoint(self) -> Path:
        return self.root / naming.CHECKPOINT_FILE
