"""The exporter's two snapshots (``_snapshots/schedule_levels.parquet``, pending messages per
delay level; ``consumer_lag.parquet``, every group's lag per queue), written only when a
report would read something new in them (DEC-memory-at-rest: the exporter at rest holds no
pyarrow).

A snapshot is rewritten when its rows (their ``snapshot_ms`` aside) differ from those it was
last written with, or when a report dates what it holds by the hour it was taken (the lateness
job's pending messages per level and hour) and that hour has passed. One that holds nothing a
report reads (no level with pending messages, no group) and does not exist is not written: the
jobs read a missing snapshot as an empty one. What was last written is kept beside the snapshot
(``naming.EXPORT_SNAPSHOT_STAMP``), so a restarted exporter does not rewrite it either; the
stamp is removed before the snapshot is written and written after, so a crash between the two
leaves a snapshot that is rewritten at the next look.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clepsydra_analytics.export_files import ExportFiles, hour_of
from clepsydra_core import naming

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

STAMP_FIELD = "snapshot_ms"
"""When the snapshot was taken: left out of the comparison."""


@dataclass(frozen=True, slots=True)
class Written:
    """What a snapshot was last written with."""

    digest: str
    hour: str


def digest_of(rows: Sequence[dict[str, Any]]) -> str:
    """The rows' digest, ``snapshot_ms`` left out."""
    content = [{k: v for k, v in row.items() if k != STAMP_FIELD} for row in rows]
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


class SnapshotWriter:
    """Writes a snapshot when it changed (module docstring); remembers what it wrote."""

    def __init__(self, files: ExportFiles) -> None:
        self.files = files
        self._written: dict[str, Written | None] = {}

    def stamp_path(self, name: str) -> str:
        return (f"{self.files.root}/{naming.EXPORT_SNAPSHOT_DIR}/"
                f"{naming.EXPORT_SNAPSHOT_STAMP.format(name=name)}")

    def last_written(self, name: str) -> Written | None:
        if name not in self._written:
            self._written[name] = self._read_stamp(name)
        return self._written[name]

    def write(self, name: str, rows: Sequence[dict[str, Any]], now_ms: int, *, empty: bool,
              dated: bool, table: Callable[[], pa.Table]) -> bool:
        """Write ``table()`` (the ``rows``) as snapshot ``name`` unless nothing changed for a
        report: ``empty``, a report reads nothing in them; ``dated``, a report reads them by
        the hour they were taken. True when written."""
        now = Written(digest_of(rows), hour_of(now_ms))
        last = self.last_written(name)
        exists = self.files.exists(self.files.snapshot_path(name))
        if last is None and empty and not exists:
            return False
        if (last is not None and exists and last.digest == now.digest
                and (not dated or last.hour == now.hour)):
            return False
        self._written[name] = None
        self.files.remove(self.stamp_path(name))
        self.files.write_snapshot(name, table())
        self.files.write_small(self.stamp_path(name), json.dumps(
            {"digest": now.digest, "hour": now.hour}).encode())
        self._written[name] = now
        return True

    def _read_stamp(self, name: str) -> Written | None:
        raw = self.files.read_small(self.stamp_path(name))
        if raw is None:
            return None
        try:
            stamp = json.loads(raw)
            return Written(str(stamp["digest"]), str(stamp["hour"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("unreadable snapshot stamp %s: the snapshot is written again",
                           self.stamp_path(name))
            return None
