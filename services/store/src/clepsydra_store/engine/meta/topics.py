"""Topic configuration (data_dir/config/topics.json, fsync'd on every change)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_store.engine.log.segment import write_file_atomic


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    queues: int
    system: bool
    since: int = 0
    """CommitLog offset at which this topic was created: records of the same name below it
    belong to an earlier topic of that name, deleted since, and are never dispatched to this
    one (recovery, key look-ups)."""


class TopicRegistry:
    def __init__(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        self.path = config_dir / naming.TOPICS_FILE
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self.removals = 0
        """Topics deleted or given fewer queues since the store started: a copy made for a
        topic earlier (DEC-timer-staging) may no longer have a place when this has moved."""
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_bytes())
                for name, cfg in doc.items():
                    self._topics[name] = TopicConfig(name, int(cfg["queues"]),
                                                     bool(cfg.get("system", False)),
                                                     int(cfg.get("since", 0)))
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"topics file {self.path} is unreadable: {exc}") from exc

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def create(self, name: str, queues: int, system: bool,
               since: int = 0) -> tuple[TopicConfig, bool]:
        """(config, created); an existing topic is returned as is (the caller compares)."""
        with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                return existing, False
            cfg = TopicConfig(name, queues, system, since)
            self._topics = {**self._topics, name: cfg}
            self._save()
            return cfg, True

    def set_queues(self, name: str, queues: int) -> TopicConfig | None:
        """The topic with its new queue count, written durably; None when it does not exist."""
        with self._lock:
            existing = self._topics.get(name)
            if existing is None:
                return None
            if existing.queues != queues:
                if queues < existing.queues:
                    self.removals += 1
                self._topics = {**self._topics, name: replace(existing, queues=queues)}
                self._save()
            return self._topics[name]

    def delete(self, name: str) -> bool:
        with self._lock:
            if name not in self._topics:
                return False
            self._topics = {k: v for k, v in self._topics.items() if k != name}
            self.removals += 1
            self._save()
            return True

    def _save(self) -> None:
        doc = {t.name: {"queues": t.queues, "system": t.system, **({"since": t.since}
                                                                   if t.since else {})}
               for t in self._topics.values()}
        write_file_atomic(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())
