"""A store shard's own cluster state, in ``data_dir/config/cluster.json`` (written tmp + fsync +
rename on every change, like the topics):

- ``draining``: the shard refuses new messages (produce, send-back copies, DLQ resends: 403
  NO_PERMISSION, R2) while its consumers, levels and timers drain (DEC-shard-drain). It
  survives a restart: a shard being drained stays drained until ``resume``.
- ``deleted``: topic name -> when it was deleted here (epoch ms). A topic deleted through any
  shard is remembered on every shard that applied the delete, so that a shard starting later
  does not take it back from a peer that missed the delete (``cluster/sync.py``). A create of
  the same name forgets it.

``changing`` is held while a topic is created or deleted here together with its tombstone
(``api/fanout.py``), and while the start-up sync checks the tombstones and takes a topic: the
sync never sees a topic gone from the store but not yet marked deleted, and takes it back.

Versioned: ``{"version": 1, ...}``; a file without a version is read as version 1, a newer
version stops the store (it would drop what it does not know).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_store.engine.log.segment import write_file_atomic

VERSION = 1


class ClusterState:
    def __init__(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        self.path = config_dir / naming.CLUSTER_FILE
        self._lock = threading.Lock()
        self.changing = threading.Lock()
        """A topic's create or delete and its tombstone, or the sync's take (module docstring)."""
        self._draining = False
        self._deleted: dict[str, int] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            doc: Any = json.loads(self.path.read_bytes())
            version = int(doc.get("version", VERSION))
            if version > VERSION:
                raise StoreError(f"{self.path} is of version {version}; this store reads up to "
                                 f"{VERSION}: run a newer store")
            self._draining = bool(doc.get("draining", False))
            self._deleted = {str(k): int(v) for k, v in (doc.get("deleted") or {}).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise StoreError(f"cluster state file {self.path} is unreadable: {exc}") from exc

    @property
    def draining(self) -> bool:
        return self._draining

    def set_draining(self, draining: bool) -> bool:
        """Set it durably; True when it changed."""
        with self._lock:
            if self._draining == draining:
                return False
            self._draining = draining
            self._save()
            return True

    def is_deleted(self, topic: str) -> bool:
        return topic in self._deleted

    def mark_deleted(self, topic: str, at_ms: int) -> None:
        with self._lock:
            self._deleted = {**self._deleted, topic: at_ms}
            self._save()

    def forget_deleted(self, topic: str) -> None:
        if topic not in self._deleted:
            return
        with self._lock:
            self._deleted = {k: v for k, v in self._deleted.items() if k != topic}
            self._save()

    def _save(self) -> None:
        doc = {"version": VERSION, "draining": self._draining,
               "deleted": dict(sorted(self._deleted.items()))}
        write_file_atomic(self.path, json.dumps(doc, indent=1).encode())
