"""The checkpoint (data_dir/checkpoint.json): the CommitLog offset up to which ConsumeQueue and
key-index files are flushed, the per-level handed-over marks (SPEC D9) and the queue ranges at
that moment (so recovery can tell a ConsumeQueue that lost files). Written tmp+fsync+rename."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from clepsydra_store.engine.log.segment import write_file_atomic

logger = logging.getLogger(__name__)

QueueRanges = dict[str, dict[int, tuple[int, int]]]
"""{topic: {queue_id: (min_offset, max_offset)}}"""


@dataclass(slots=True)
class Checkpoint:
    commitlog_offset: int = 0
    handed_over: dict[int, int] = field(default_factory=dict)
    queues: QueueRanges = field(default_factory=dict)

    def save(self, path: Path) -> None:
        doc = {
            "commitlog_offset": self.commitlog_offset,
            "handed_over": {str(level): mark for level, mark in self.handed_over.items()},
            "queues": {topic: {str(q): list(r) for q, r in queues.items()}
                       for topic, queues in self.queues.items()},
        }
        write_file_atomic(path, json.dumps(doc, separators=(",", ":")).encode())

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        """None when absent or unreadable (recovery then starts from the first segment)."""
        try:
            doc = json.loads(path.read_bytes())
            return cls(
                commitlog_offset=int(doc["commitlog_offset"]),
                handed_over={int(k): int(v) for k, v in doc.get("handed_over", {}).items()},
                queues={topic: {int(q): (int(r[0]), int(r[1])) for q, r in queues.items()}
                        for topic, queues in doc.get("queues", {}).items()},
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            logger.warning("checkpoint unreadable path=%s: %s; recovering from the start",
                           path, exc)
            return None
