"""Consumer-group settings (SPEC R3, R5) in data_dir/config/group_settings.json, written
(tmp + fsync + rename) on every change, like the topics: the store is their durable owner, so a
Redis restarted empty loses nothing (the retry service keeps only a cache there)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import StoreError
from clepsydra_core.groups import GroupSettings
from clepsydra_store.engine.log.segment import write_file_atomic


class GroupSettingsRegistry:
    def __init__(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        self.path = config_dir / naming.GROUP_SETTINGS_FILE
        self._lock = threading.Lock()
        self._groups: dict[str, GroupSettings] = {}
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_bytes())
                self._groups = {str(name): GroupSettings.from_json(cfg)
                                for name, cfg in doc.items()}
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(f"group settings file {self.path} is unreadable: "
                                 f"{exc}") from exc

    def get(self, group: str) -> GroupSettings | None:
        return self._groups.get(group)

    def all(self) -> dict[str, GroupSettings]:
        return dict(sorted(self._groups.items()))

    def put(self, group: str, settings: GroupSettings) -> bool:
        """Store (durably, before returning) a group's settings; True when the group is new."""
        with self._lock:
            created = group not in self._groups
            if created or self._groups[group] != settings:
                groups = {**self._groups, group: settings}
                doc = {name: cfg.to_json() for name, cfg in sorted(groups.items())}
                write_file_atomic(self.path, json.dumps(doc, indent=1).encode())
                self._groups = groups
            return created
