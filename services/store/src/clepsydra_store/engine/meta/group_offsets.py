"""Consumer progress: {group: {topic: {queueId: offset}}} in
data_dir/config/group_offsets.json, written (tmp+rename) when dirty by the store's
housekeeping thread each second and at close."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_store.engine.log.segment import write_file_atomic

logger = logging.getLogger(__name__)


class GroupOffsets:
    def __init__(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        self.path = config_dir / naming.GROUP_OFFSETS_FILE
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._offsets: dict[str, dict[str, dict[int, int]]] = {}
        self._dirty = False
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_bytes())
                self._offsets = {
                    group: {topic: {int(q): int(o) for q, o in queues.items()}
                            for topic, queues in topics.items()}
                    for group, topics in doc.items()
                }
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(f"group offsets file {self.path} is unreadable: {exc}") from exc

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        with self._lock:
            self._offsets.setdefault(group, {}).setdefault(topic, {})[queue_id] = queue_offset
            self._dirty = True

    def get(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        with self._lock:
            topics = self._offsets.get(group, {})
            return {t: dict(q) for t, q in topics.items() if topic is None or t == topic}

    def topic_offsets(self, topic: str) -> dict[str, dict[int, int]]:
        """{group: {queueId: offset}} of every group that committed progress on ``topic``."""
        with self._lock:
            return {g: dict(ts[topic]) for g, ts in self._offsets.items() if topic in ts}

    def forget_topic(self, topic: str) -> list[str]:
        """Drop every group's progress on ``topic`` (deleted, or created anew) and write the
        file at once; the groups that had some."""
        with self._lock:
            groups = sorted(g for g, ts in self._offsets.items() if topic in ts)
            for group in groups:
                del self._offsets[group][topic]
                if not self._offsets[group]:
                    del self._offsets[group]
            self._dirty = self._dirty or bool(groups)
        self.persist()
        return groups

    def persist(self) -> bool:
        """Write the file if anything changed; True when written."""
        with self._write_lock:
            return self._persist()

    def _persist(self) -> bool:
        with self._lock:
            if not self._dirty:
                return False
            doc = {g: {t: {str(q): o for q, o in qs.items()} for t, qs in ts.items()}
                   for g, ts in self._offsets.items()}
            self._dirty = False
        try:
            write_file_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode())
        except OSError:
            with self._lock:
                self._dirty = True
            raise
        return True
