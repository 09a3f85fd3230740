"""The export on disk (or any filesystem pyarrow reaches): where files go, how one is written
exactly once, and what is already there.

Layout under the export URI, for schema version 1::

    v1/topic=<percent-encoded topic>/hour=2026-11-25T10/q0000-<start 20d>-<end 20d>.parquet
    v1/_snapshots/schedule_levels.parquet, consumer_lag.parquet

A file holds the rows of one queue for queue offsets ``[start, end)`` whose store timestamps
fall in one UTC hour. It is written whole under a dot-name (``.tmp-...``, which Spark and
pyarrow skip) and then renamed: a reader sees all of it or nothing. The names are the
exporter's memory: the end of the highest range of a queue is where it resumes.

A local folder (a path or ``file://``) is listed, probed and cleaned with the standard library;
pyarrow is imported when a file is first written or read (DEC-memory-at-rest: the exporter at
rest holds no pyarrow). Any other URI opens its pyarrow filesystem at once.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clepsydra_analytics.schemas import SCHEMA_VERSION
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

logger = logging.getLogger(__name__)

HOUR_FORMAT = "%Y-%m-%dT%H"


class CorruptExportFile(ClepsydraError):
    """An export file is not readable Parquet (a partial copy, a disk error)."""

    code = "CORRUPT_EXPORT_FILE"
    http_status = 500


def hour_of(timestamp_ms: int) -> str:
    """The UTC hour of a store timestamp, as in the ``hour=`` folder names."""
    return time.strftime(HOUR_FORMAT, time.gmtime(timestamp_ms / 1000))


def arrow_errors() -> tuple[type[Exception], ...]:
    """pyarrow's exception class once pyarrow is imported (before that none can be raised)."""
    pa = sys.modules.get("pyarrow")
    return () if pa is None else (pa.ArrowException,)


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file under the export folder."""

    path: str
    base_name: str


@dataclass(frozen=True, slots=True)
class ExportedRange:
    topic: str
    queue_id: int
    start_offset: int
    end_offset: int
    hour: str
    path: str
    shard: int = 0
    """The store shard the queue is on (DEC-store-shards)."""


class ExportFiles:
    """The export folder of one schema version; the files it writes, and the ends it resumes
    from, are those of the queues of store shard ``shard`` (every shard's exporter writes into
    the one folder, each file named with its shard, ``naming.export_file_name``)."""

    def __init__(self, uri: str, shard: int = 0) -> None:
        self.uri = uri
        self.shard = shard
        self.local = "://" not in uri or uri.startswith("file://")
        self._fs: pafs.FileSystem | None = None
        if self.local:
            base = uri.removeprefix("file://") if "://" in uri else os.path.abspath(uri)
        else:
            import pyarrow as pa
            import pyarrow.fs as pafs

            try:
                self._fs, base = pafs.FileSystem.from_uri(uri)
            except (pa.ArrowInvalid, OSError, ValueError) as exc:
                raise ConfigError(f"CLEPSYDRA_ANALYTICS_EXPORT_URI={uri!r} is not a usable "
                                  f"location: {exc}") from exc
        self.root = f"{base.rstrip('/')}/{naming.export_schema_dir(SCHEMA_VERSION)}"

    @property
    def fs(self) -> pafs.FileSystem:
        """pyarrow's filesystem of the folder (a local one is opened on first use)."""
        if self._fs is None:
            import pyarrow.fs as pafs

            self._fs = pafs.LocalFileSystem()
        return self._fs

    # ---- paths ---------------------------------------------------------------------------

    def topic_dir(self, topic: str) -> str:
        return f"{self.root}/{naming.export_topic_dir(topic)}"

    def hour_dir(self, topic: str, hour: str) -> str:
        return f"{self.topic_dir(topic)}/{naming.export_hour_dir(hour)}"

    def snapshot_path(self, name: str) -> str:
        return f"{self.root}/{naming.EXPORT_SNAPSHOT_DIR}/{name}.parquet"

    def spark_path(self, path: str) -> str:
        """A path as Spark reads it (local files as plain absolute paths)."""
        if self.local:
            return path
        scheme = self.uri.split("://", 1)[0]
        return f"{scheme}://{path}"

    # ---- writing -------------------------------------------------------------------------

    def check_writable(self) -> None:
        """ConfigError naming the folder when a file cannot be created in it."""
        probe = f"{self.root}/{naming.EXPORT_TEMP_PREFIX}probe-{uuid.uuid4().hex}"
        try:
            if self.local:
                os.makedirs(self.root, exist_ok=True)
                with open(probe, "wb") as local_out:
                    local_out.write(b"ok")
                os.remove(probe)
                return
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(probe) as out:
                out.write(b"ok")
            self.fs.delete_file(probe)
        except OSError as exc:
            raise ConfigError(f"the export folder {self.uri} is not writable "
                              f"(CLEPSYDRA_ANALYTICS_EXPORT_URI): {exc}") from exc

    def _write_whole(self, folder: str, name: str, table: pa.Table) -> str:
        import pyarrow.parquet as pq

        self.fs.create_dir(folder, recursive=True)
        final = f"{folder}/{name}"
        temp = f"{folder}/{naming.EXPORT_TEMP_PREFIX}{uuid.uuid4().hex}-{name}"
        try:
            with self.fs.open_output_stream(temp) as out:
                pq.write_table(table, out, compression="zstd")
            self.fs.move(temp, final)
        except BaseException:
            try:
                self.fs.delete_file(temp)
            except OSError:
                pass
            raise
        return final

    def write_range(self, topic: str, queue_id: int, start_offset: int, end_offset: int,
                    hour: str, table: pa.Table) -> ExportedRange:
        """Write the rows of ``[start_offset, end_offset)`` of one queue and hour, whole."""
        path = self._write_whole(self.hour_dir(topic, hour),
                                 naming.export_file_name(queue_id, start_offset, end_offset,
                                                         self.shard),
                                 table)
        return ExportedRange(topic, queue_id, start_offset, end_offset, hour, path, self.shard)

    def write_snapshot(self, name: str, table: pa.Table) -> None:
        folder = f"{self.root}/{naming.EXPORT_SNAPSHOT_DIR}"
        self._write_whole(folder, f"{name}.parquet", table)

    def remove_temp_files(self) -> int:
        """Delete files a crashed writer left half-written (only the one exporter may call
        this, at its start)."""
        removed = 0
        for info in self._walk():
            if info.base_name.startswith(naming.EXPORT_TEMP_PREFIX):
                if self.local:
                    os.remove(info.path)
                else:
                    self.fs.delete_file(info.path)
                removed += 1
        if removed:
            logger.info("removed half-written export files count=%d root=%s", removed, self.root)
        return removed

    def write_small(self, path: str, data: bytes) -> None:
        """A small file written whole (temp name, rename)."""
        folder, name = path.rsplit("/", 1)
        temp = f"{folder}/{naming.EXPORT_TEMP_PREFIX}{uuid.uuid4().hex}-{name}"
        if self.local:
            os.makedirs(folder, exist_ok=True)
            with open(temp, "wb") as out:
                out.write(data)
            os.replace(temp, path)
            return
        self.fs.create_dir(folder, recursive=True)
        with self.fs.open_output_stream(temp) as stream:
            stream.write(data)
        self.fs.move(temp, path)

    def remove(self, path: str) -> None:
        """Delete ``path`` if it exists."""
        try:
            if self.local:
                os.remove(path)
            elif self.exists(path):
                self.fs.delete_file(path)
        except FileNotFoundError:
            pass

    # ---- reading -------------------------------------------------------------------------

    def read_small(self, path: str) -> bytes | None:
        """A small file's bytes; None when it does not exist."""
        try:
            if self.local:
                with open(path, "rb") as local_in:
                    return local_in.read()
            with self.fs.open_input_stream(path) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None

    def _walk(self) -> list[FileEntry]:
        if self.local:
            return [FileEntry(f"{folder}/{name}", name)
                    for folder, _dirs, names in os.walk(self.root) for name in names]
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        return [FileEntry(i.path, i.base_name) for i in self.fs.get_file_info(selector)
                if i.type == pafs.FileType.File]

    def exists(self, path: str) -> bool:
        """Whether the file ``path`` (under the folder) exists."""
        if self.local:
            return os.path.isfile(path)
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(path).type == pafs.FileType.File)

    def ranges(self) -> list[ExportedRange]:
        """Every complete export file, parsed from its path."""
        out: list[ExportedRange] = []
        for info in self._walk():
            parsed = naming.parse_export_file(info.base_name)
            if parsed is None:
                continue
            parts = info.path[len(self.root) + 1:].split("/")
            if len(parts) != 3:
                continue
            topic = naming.topic_of_export_dir(parts[0])
            hour = parts[1][len("hour="):] if parts[1].startswith("hour=") else None
            if topic is None or hour is None:
                continue
            shard, queue_id, start, end = parsed
            out.append(ExportedRange(topic, queue_id, start, end, hour, info.path, shard))
        return out

    def exported_ends(self) -> dict[tuple[str, int], int]:
        """(topic, queue_id) -> the end of the highest exported range of this shard's queue."""
        ends: dict[tuple[str, int], int] = {}
        for r in self.ranges():
            if r.shard != self.shard:
                continue
            key = (r.topic, r.queue_id)
            ends[key] = max(ends.get(key, 0), r.end_offset)
        return ends

    def shard_ends(self) -> dict[tuple[str, int, int], int]:
        """(topic, queue_id, shard) -> the end of the highest exported range, every shard."""
        ends: dict[tuple[str, int, int], int] = {}
        for r in self.ranges():
            key = (r.topic, r.queue_id, r.shard)
            ends[key] = max(ends.get(key, 0), r.end_offset)
        return ends

    def files_since(self, since_hour: str) -> list[ExportedRange]:
        """The export files of hours at or after ``since_hour``, in path order."""
        return sorted((r for r in self.ranges() if r.hour >= since_hour), key=lambda r: r.path)

    def check_readable(self, ranges: Iterable[ExportedRange]) -> None:
        """CorruptExportFile naming the first file whose Parquet footer does not read."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for r in ranges:
            try:
                with self.fs.open_input_file(r.path) as f:
                    pq.ParquetFile(f).metadata  # noqa: B018 - reads and checks the footer
            except (pa.ArrowException, OSError) as exc:
                raise CorruptExportFile(f"export file {r.path} is not readable Parquet "
                                        f"({exc}); move it away or re-export that range") from exc

    def read_snapshot(self, name: str) -> pa.Table | None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.snapshot_path(name)
        try:
            with self.fs.open_input_file(path) as f:
                table: pa.Table = pq.read_table(f)
                return table
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError) as exc:
            raise CorruptExportFile(f"snapshot {path} is not readable Parquet ({exc})") from exc

    def read_table(self, r: ExportedRange) -> pa.Table:
        import pyarrow.parquet as pq

        with self.fs.open_input_file(r.path) as f:
            table: pa.Table = pq.read_table(f)
            return table


def describe(ranges: Iterable[ExportedRange]) -> dict[str, Any]:
    """Count of files and rows ranges per topic (for logs and status)."""
    out: dict[str, Any] = {}
    for r in ranges:
        entry = out.setdefault(r.topic, {"files": 0, "rows": 0})
        entry["files"] += 1
        entry["rows"] += r.end_offset - r.start_offset
    return out
