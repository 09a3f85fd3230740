"""Dispatch: what follows a record into the indexes, synchronously under the writer lock —
its ConsumeQueue entry, its keys in the key index, and the level's handed-over mark when it
carries ``SCHEDULE_OFFSET`` (SPEC D9: the mark is exactly as durable as the append, and
recovery re-derives it by re-dispatching from the checkpoint).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.levels import DelayLevels
from clepsydra_core.records import CommitLogRecord, tags_code
from clepsydra_store.engine.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.key_index import ENTRIES_PER_FILE, KeyIndex
from clepsydra_store.engine.segment import Segment

logger = logging.getLogger(__name__)


def parse_schedule_offset(value: str | None) -> tuple[int, int] | None:
    """``"<level>:<queueOffset>"`` -> (level, queue_offset); None when absent or malformed."""
    if not value:
        return None
    level, sep, queue_offset = value.partition(":")
    try:
        return (int(level), int(queue_offset)) if sep else None
    except ValueError:
        return None


def record_keys(props: dict[str, str]) -> list[str]:
    """The index keys of a message: its KEYS (space-separated) and its UNIQ_KEY."""
    keys = props.get(P.KEYS, "").split()
    uniq = props.get(P.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    return keys


class Dispatcher:
    """Owns the ConsumeQueues, the key index and the handed-over marks."""

    def __init__(self, consumequeue_dir: Path, index_dir: Path, entries_per_file: int,
                 delay_levels: DelayLevels, *,
                 key_index_entries: int = ENTRIES_PER_FILE) -> None:
        self.consumequeue_dir = consumequeue_dir
        self.entries_per_file = entries_per_file
        self.delay_levels = delay_levels
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._create_lock = threading.Lock()
        self.key_index = KeyIndex(index_dir, entries_per_file=key_index_entries)
        self.handed_over: dict[int, int] = {}
        """level -> highest schedule queue offset handed to a real topic (D9)."""
        self._replay: dict[ConsumeQueue, tuple[int, list[bytes]]] = {}
        self.replay_known: set[str] = set()
        self.replay_since: dict[str, int] = {}
        """topic -> CommitLog offset it was created at: older records of that name belong to
        a topic deleted since (TopicConfig.since)."""

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The ConsumeQueue of (topic, queue_id), opened (or created) on first use."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            with self._create_lock:  # readers (schedule_entries) may open one too
                cq = self.queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(self.consumequeue_dir / topic / str(queue_id), topic,
                                      queue_id, self.entries_per_file)
                    self.queues = {**self.queues, key: cq}
        return cq

    def existing_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def mark(self, level: int) -> int:
        return self.handed_over.get(level, -1)

    def raise_mark(self, level: int, queue_offset: int) -> None:
        if queue_offset > self.handed_over.get(level, -1):
            self.handed_over[level] = queue_offset

    # ---- recovery ------------------------------------------------------------------------
    def redispatch(self, record: CommitLogRecord, size: int) -> None:
        """Dispatch one recovered record again (idempotent: its entry goes at byte
        20·queueOffset; keys are deduplicated; marks only rise)."""
        topic = record.topic
        if topic not in self.replay_known or record.commitlog_offset < self.replay_since.get(
                topic, 0):
            return  # topic deleted since (and perhaps created anew)
        props = record.properties
        if topic == naming.SCHEDULE_TOPIC:
            level = self.delay_levels.level_of_queue(record.queue_id)
            code = record.store_timestamp + self.delay_levels.delay_ms(level)
        else:
            code = tags_code(props.get(P.TAGS))
            mark = parse_schedule_offset(props.get(P.SCHEDULE_OFFSET))
            if mark is not None:
                self.raise_mark(*mark)
        cq = self.queue(topic, record.queue_id)
        packed = ENTRY.pack(record.commitlog_offset, size, code)
        pending = self._replay.get(cq)
        if pending is not None and pending[0] + len(pending[1]) == record.queue_offset:
            pending[1].append(packed)
        else:
            if pending is not None:
                cq.write(pending[0], b"".join(pending[1]))
            self._replay[cq] = (record.queue_offset, [packed])
            if len(self._replay) > 256:
                self.finish_replay()
        keys = record_keys(props)
        if keys:
            self.key_index.add(keys, record.commitlog_offset, dedupe=True)

    def finish_replay(self) -> None:
        for cq, (first, parts) in self._replay.items():
            cq.write(first, b"".join(parts))
        self._replay = {}
        self.key_index.write_pending()

    # ---- durability / retention ------------------------------------------------------------
    def flush(self) -> None:
        """fsync every ConsumeQueue file written since the last flush, and the key index."""
        for cq in list(self.queues.values()):
            cq.fsync()
        self.key_index.fsync()

    def ranges(self) -> dict[str, dict[int, tuple[int, int]]]:
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for (topic, queue_id), cq in list(self.queues.items()):
            out.setdefault(topic, {})[queue_id] = (cq.min_offset, cq.max_offset)
        return out

    def drop_below(self, commitlog_min: int) -> list[Segment]:
        removed: list[Segment] = []
        for cq in list(self.queues.values()):
            removed += cq.drop_below(commitlog_min)
        self.key_index.drop_below(commitlog_min)
        return removed

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        with self._create_lock:
            gone = [cq for (t, _), cq in self.queues.items() if t == topic]
            self.queues = {k: v for k, v in self.queues.items() if k[0] != topic}
        return gone

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.key_index.close()
