"""The exporter: a consumer group of its own that copies the selected topics into Parquet.

Exactly once into files (see export_files.py): per queue, rows are buffered from the position
where the last complete file ends, written whole (temp name, rename) when enough have gathered
or the flush interval passed, and only then is the group's offset committed to the store. A
crash at any point loses only the buffer and the temp file; the restart resumes at the end of
the highest complete file, so no row is written twice and none is skipped. The store's
committed offset is for people (lag) and for a queue whose files were all deleted.

Topics are listed again every cycle, so a new topic that matches the patterns is picked up
without a restart.

The exporter reads everything that is written, so it must not take the producers' share of the
store (DEC-exporter-yields): a cycle that reached the end of every queue is followed by a pause
of the poll interval (a queue written to steadily is read once a second, in pages of what came
meanwhile, not once per message), and while the store's topics keep growing and the export is
behind, each pull is followed by a pause that keeps the pulls to ``busy_share`` of the
exporter's time: under a burst the export lags and catches up at full speed once the writes
stop. Its threads run niced, so the cores go to the services first.

pyarrow is imported when the first file is written (a snapshot that changed, or rows): an
exporter at rest holds none of it (DEC-memory-at-rest; export_files.py, snapshots.py).
"""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportFiles, arrow_errors, hour_of
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.snapshots import SnapshotWriter
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_client.topics import TopicInfo
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, ConfigError
from clepsydra_core.runtime import telemetry

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

LOCK_FILE = "exporter.lock"


@dataclass
class QueueBuffer:
    """Rows pulled from one queue and not yet in a file: ``[start_offset, next_offset)``."""

    start_offset: int
    next_offset: int
    cols: dict[str, list[Any]] = field(default_factory=schemas.empty_columns)
    first_pull_s: float | None = None

    @property
    def rows(self) -> int:
        return len(self.cols["msg_id"])


@dataclass
class CycleResult:
    rows_pulled: int = 0
    rows_written: int = 0
    files_written: int = 0
    caught_up: bool = True
    """Every queue pulled to its end and every buffer written."""
    behind: bool = False
    """A queue was left with messages not pulled yet (the next cycle comes at once)."""


def catch_up_cycles(cycle: Callable[..., CycleResult], timeout_s: float) -> CycleResult:
    """``cycle(force_flush=True)`` again until a cycle caught up or ``timeout_s`` passed: the
    sum of their counts, caught up as the last one was."""
    total = CycleResult()
    deadline = time.monotonic() + timeout_s
    while True:
        r = cycle(force_flush=True)
        total.rows_pulled += r.rows_pulled
        total.rows_written += r.rows_written
        total.files_written += r.files_written
        if r.caught_up or time.monotonic() > deadline:
            total.caught_up = r.caught_up
            return total


class WriteWatch:
    """Whether the store is being written to now: the sum of every topic's end grew between
    two listings (producers, or the scheduler's hand-overs). A listing is taken at the start
    of every cycle and, during a long one, again once ``every_s`` has passed."""

    def __init__(self, every_s: float, clock_s: Callable[[], float]) -> None:
        self.every_s = every_s
        self.clock_s = clock_s
        self.growing = False
        self._ends: int | None = None
        self._seen_s: float | None = None

    def saw(self, topics: list[TopicInfo]) -> None:
        ends = sum(q.max_offset for t in topics for q in t.queues)
        self.growing = self._ends is not None and ends > self._ends
        self._ends, self._seen_s = ends, self.clock_s()

    def stale(self) -> bool:
        return self._seen_s is None or self.clock_s() - self._seen_s >= self.every_s


GC_THRESHOLDS = (100_000, 50, 100)
"""The exporter allocates some thirty objects a row (the pulled JSON, the column values), none
in a reference cycle, and holds up to a file's worth of them: with Python's default first
threshold (700) the collector walked those buffers again and again, about half the CPU of the
row conversion (the exporter's rows/s: 38k -> 46k in one run of bench.analytics)."""


def tune_gc() -> None:
    """Collect less often (the exporter process; bench.analytics measures the same)."""
    gc.set_threshold(*GC_THRESHOLDS)


class ExporterLock:
    """One exporter per export folder on this machine: an exclusive flock."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self, *, wait: bool = False) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held while exporting
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError:
            handle.close()
            return False
        self._file = handle
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Exporter:
    def __init__(self, settings: AnalyticsSettings, *, files: ExportFiles | None = None,
                 reader: StoreReader | None = None,
                 clock_s: Callable[[], float] = time.monotonic, snapshots: bool = True) -> None:
        """``snapshots``: this exporter writes the snapshot tables (one exporter of a cluster
        of store shards does: export_shards.py)."""
        self.settings = settings
        self.write_snapshot_tables = snapshots
        self.files = files or ExportFiles(settings.export_uri)
        self.reader = reader or StoreReader(settings.store_url)
        self.clock_s = clock_s
        self.buffers: dict[tuple[str, int], QueueBuffer] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.rows_written_total = 0
        self.rows_pulled_total = 0
        self.lag_messages: int | None = None
        """Messages of the exported queues not pulled yet, as of the end of the last cycle
        (each queue's end as its last pull answered, or as listed): how far the export is
        behind the producers."""
        self.ends: dict[tuple[str, int], int] = {}
        """Each queue's end as its last pull answered (``maxOffset``)."""
        self.last_cycle_s: float | None = None
        """When the last cycle ended (``clock_s``), whether it succeeded or not."""
        self.last_error: str | None = None
        self.cycle_failures = 0
        self._last_snapshot_s: float | None = None
        self._flush_request_ns: int | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-pull")
        self.snapshots = SnapshotWriter(self.files)
        self.writes = WriteWatch(settings.poll_interval_s, clock_s)
        self.pace = True
        """Pause after pulls while the store is written to and the export is behind
        (:meth:`catch_up` turns it off: it is asked to finish)."""
        self.paused_s = 0.0
        """Seconds spent in those pauses (the exporter's /metrics)."""
        self._wait: Callable[[float], object] = time.sleep

    # ---- start ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the folder, drop half-written files, learn where each queue resumes."""
        self.files.check_writable()
        self.files.remove_temp_files()
        self.positions = dict(self.files.exported_ends())
        self.buffers.clear()
        self._flush_request_ns = self._flush_request_stamp()
        logger.info("exporter ready root=%s queues_with_files=%d", self.files.root,
                    len(self.positions))

    def _resume_offset(self, topic: str, queue_id: int, min_offset: int) -> int:
        key = (topic, queue_id)
        if key not in self.positions:
            committed = None
            try:
                committed = self.reader.committed(self.settings.export_group, topic).get(queue_id)
            except ClepsydraError as exc:
                logger.warning("no committed offset for topic=%s queue_id=%d: %s", topic,
                               queue_id, exc)
            self.positions[key] = committed if committed is not None else min_offset
        if self.positions[key] < min_offset:
            logger.warning("export position below the queue minimum (retention) topic=%s "
                           "queue_id=%d position=%d min_offset=%d", topic, queue_id,
                           self.positions[key], min_offset)
            self.positions[key] = min_offset
        return self.positions[key]

    # ---- one cycle -----------------------------------------------------------------------

    def cycle(self, *, force_flush: bool = False) -> CycleResult:
        """Pull what is new in every matching queue (up to a file's worth each), write the
        buffers that are due, commit. ``force_flush`` (or a flush request from a jobs run on
        this machine) writes every buffer."""
        force_flush = self._flush_requested() or force_flush
        result = CycleResult()
        s = self.settings
        lag = 0
        topics = self.reader.topics()
        self.writes.saw(topics)
        for info in topics:
            if not s.topics.matches(info.name):
                continue
            for q in info.queues:
                key = (info.name, q.queue_id)
                buf = self.buffers.get(key)
                position = buf.next_offset if buf else self._resume_offset(*key, q.min_offset)
                if buf is None:
                    buf = self.buffers[key] = QueueBuffer(position, position)
                result.rows_pulled += self._pull_queue(buf, info.name, q.queue_id, q.max_offset)
                if buf.next_offset < q.max_offset:
                    result.caught_up = False
                    result.behind = True
                lag += max(self.ends.get(key, 0), q.max_offset) - buf.next_offset
                now = self.clock_s()
                due = (buf.rows >= s.file_rows or force_flush
                       or (buf.first_pull_s is not None
                           and now - buf.first_pull_s >= s.flush_interval_s))
                if due and buf.next_offset > buf.start_offset:
                    written, files = self._flush(info.name, q.queue_id, buf)
                    result.rows_written += written
                    result.files_written += files
                elif buf.rows and not due:
                    result.caught_up = False
        self._maybe_snapshot(force_flush)
        self.lag_messages = lag
        self.rows_pulled_total += result.rows_pulled
        return result

    def _fetch(self, buf_rows: int, topic: str, queue_id: int,
               queue_offset: int) -> Future[dict[str, Any]]:
        room = max(1, self.settings.file_rows - buf_rows)
        return self._pool.submit(self.reader.pull, topic, queue_id, queue_offset,
                                 min(self.settings.pull_max, room),
                                 with_body=self.settings.export_body)

    def _pull_queue(self, buf: QueueBuffer, topic: str, queue_id: int, max_offset: int) -> int:
        """Pull into ``buf`` until the queue's end (as listed) or a file's worth. The next pull
        is already on its way while this one's rows are converted (the store's time and ours
        overlap on two cores), except while the exporter yields to writers (module docstring):
        then each pull is followed by its pause."""
        if buf.next_offset >= max_offset or buf.rows >= self.settings.file_rows:
            return 0
        pulled = 0
        started = time.monotonic()
        pending: Future[dict[str, Any]] | None = self._fetch(buf.rows, topic, queue_id,
                                                             buf.next_offset)
        while pending is not None:
            raw = pending.result()
            took = time.monotonic() - started
            pending = None
            messages = raw.get("messages") or []
            next_offset = max(int(raw.get("nextOffset", buf.next_offset + len(messages))),
                              buf.next_offset)
            self.ends[(topic, queue_id)] = int(raw.get("maxOffset", next_offset))
            rows_after = buf.rows + len(messages)
            more = bool(messages and next_offset < max_offset
                        and rows_after < self.settings.file_rows)
            yielding = more and self._yielding()
            if more and not yielding:
                started = time.monotonic()
                pending = self._fetch(rows_after, topic, queue_id, next_offset)
            self._apply(buf, topic, queue_id, messages, next_offset)
            pulled += len(messages)
            if yielding:
                self._pause(took)
                started = time.monotonic()
                pending = self._fetch(buf.rows, topic, queue_id, next_offset)
        return pulled

    def _yielding(self) -> bool:
        """Whether to pause after a pull that left more to read: the store is being written
        to (listed again once the last listing is a poll interval old)."""
        if not self.pace or self.settings.busy_share >= 1.0:
            return False
        if self.writes.stale():
            self.writes.saw(self.reader.topics())
        return self.writes.growing

    def _pause(self, pull_s: float) -> None:
        """Wait so that a pull of ``pull_s`` is ``busy_share`` of the time (at most a poll
        interval: a stalled store does not stall the loop for longer)."""
        share = self.settings.busy_share
        wait_s = min(pull_s * (1.0 - share) / share, self.settings.poll_interval_s)
        self.paused_s += wait_s
        self._wait(wait_s)

    def _apply(self, buf: QueueBuffer, topic: str, queue_id: int,
               messages: list[dict[str, Any]], next_offset: int) -> None:
        exported_at_ms = int(time.time() * 1000)
        schemas.append_messages(buf.cols, messages, with_body=self.settings.export_body,
                                exported_at_ms=exported_at_ms)
        if buf.first_pull_s is None and messages:
            buf.first_pull_s = self.clock_s()
        if next_offset > buf.next_offset and not messages and buf.rows == 0:
            buf.start_offset = next_offset  # a gap (retention): nothing to write for it
            self.positions[(topic, queue_id)] = next_offset
        buf.next_offset = next_offset

    def _flush(self, topic: str, queue_id: int, buf: QueueBuffer) -> tuple[int, int]:
        """Write the buffer as one file per UTC hour (contiguous offset runs), then commit."""
        with telemetry.tracer("clepsydra_analytics").start_as_current_span(
                "analytics.export", attributes={
                    "messaging.destination.name": topic, "clepsydra.queue_id": queue_id,
                    "clepsydra.rows": buf.rows, "clepsydra.start_offset": buf.start_offset,
                    "clepsydra.end_offset": buf.next_offset}):
            return self._write_and_commit(topic, queue_id, buf)

    def _write_and_commit(self, topic: str, queue_id: int,
                          buf: QueueBuffer) -> tuple[int, int]:
        files = 0
        if buf.rows:
            table = schemas.to_table(buf.cols)
            offsets = buf.cols["queue_offset"]
            hours = [hour_of(ts) for ts in buf.cols["store_timestamp_ms"]]
            run_start_row = 0
            range_start = buf.start_offset
            for row in range(1, buf.rows + 1):
                if row < buf.rows and hours[row] == hours[run_start_row]:
                    continue
                range_end = offsets[row] if row < buf.rows else buf.next_offset
                self.files.write_range(topic, queue_id, range_start, range_end,
                                       hours[run_start_row],
                                       table.slice(run_start_row, row - run_start_row))
                files += 1
                run_start_row, range_start = row, range_end
        written = buf.rows
        end = buf.next_offset
        self.positions[(topic, queue_id)] = end
        self.buffers[(topic, queue_id)] = QueueBuffer(end, end)
        self.rows_written_total += written
        try:
            self.reader.commit(self.settings.export_group, topic, queue_id, end)
        except ClepsydraError as exc:  # the files are the truth; the commit is for lag
            logger.warning("offset commit failed topic=%s queue_id=%d offset=%d: %s", topic,
                           queue_id, end, exc)
        logger.info("exported topic=%s queue_id=%d rows=%d files=%d end_offset=%d", topic,
                    queue_id, written, files, end)
        return written, files

    def beat(self) -> None:
        """Tell jobs runs (here or on another machine sharing the state folder) that an
        exporter is at work, so they do not export themselves."""
        path = self.settings.state_dir / naming.EXPORTER_HEARTBEAT
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError as exc:
            logger.warning("heartbeat not written path=%s: %s", path, exc)

    def _flush_request_stamp(self) -> int:
        try:
            return (self.settings.state_dir / naming.EXPORT_FLUSH_REQUEST).stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def _flush_requested(self) -> bool:
        """True once per touch of the flush-request file after this exporter started."""
        stamp = self._flush_request_stamp()
        if self._flush_request_ns is None:
            self._flush_request_ns = stamp  # a request older than this exporter is not for it
        if stamp == self._flush_request_ns:
            return False
        self._flush_request_ns = stamp
        return True

    # ---- snapshots -----------------------------------------------------------------------

    def _maybe_snapshot(self, force: bool) -> None:
        if not self.write_snapshot_tables:
            return
        now = self.clock_s()
        if (not force and self._last_snapshot_s is not None
                and now - self._last_snapshot_s < self.settings.flush_interval_s):
            return
        self._last_snapshot_s = now
        try:
            self.write_snapshots()
        except ClepsydraError as exc:
            logger.warning("snapshots not refreshed: %s", exc)

    def write_snapshots(self) -> None:
        """Pending messages per delay level, and every group's lag per queue: each written
        when a report would read something new in it (snapshots.py)."""
        now_ms = int(time.time() * 1000)
        levels = self.reader.schedule_levels()
        schedule_rows: list[dict[str, Any]] = [{
            "snapshot_ms": now_ms, "level": int(lv["level"]), "delay_ms": lv.get("delayMs"),
            "max_offset": lv.get("maxOffset"), "handed_over": lv.get("handedOver"),
            "pending": max(0, int(lv.get("maxOffset", 0)) - max(
                int(lv.get("handedOver", -1)) + 1, int(lv.get("minOffset", 0)))),
        } for lv in levels]
        pending = any(row["pending"] > 0 for row in schedule_rows)
        self.snapshots.write(schemas.SCHEDULE_SNAPSHOT, schedule_rows, now_ms, empty=not pending,
                             dated=pending, table=lambda: _table(
                                 schedule_rows, schemas.schedule_snapshot_schema()))
        ends = {(t.name, q.queue_id): q.max_offset for t in self.reader.topics()
                for q in t.queues}
        lag_rows = []
        for group in self.reader.groups():
            for topic, queues in self.reader.group_offsets(group).items():
                for queue_id, committed in queues.items():
                    end = ends.get((topic, queue_id))
                    if end is None:
                        continue
                    lag_rows.append({"snapshot_ms": now_ms, "consumer_group": group,
                                     "topic": topic, "queue_id": queue_id,
                                     "committed_offset": committed, "max_offset": end,
                                     "lag": max(0, end - committed)})
        self.snapshots.write(schemas.LAG_SNAPSHOT, lag_rows, now_ms, empty=not lag_rows,
                             dated=False, table=lambda: _table(
                                 lag_rows, schemas.lag_snapshot_schema()))

    # ---- loops ---------------------------------------------------------------------------

    def catch_up(self, timeout_s: float) -> CycleResult:
        """Cycles until every queue is exported up to its end, everything flushed (without the
        pauses for writers: it was asked to finish)."""
        self.pace = False
        try:
            return catch_up_cycles(self.cycle, timeout_s)
        finally:
            self.pace = True

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: cycle, sleeping ``poll_interval_s`` after a cycle that reached
        the end of every queue (a cycle that pulled rows and left a queue behind is followed at
        once). A failing
        cycle (the store away, a write error) is logged and retried after the poll interval;
        rewriting a range after a partial failure replaces the file of the same name."""
        self._wait = stop.wait
        while not stop.is_set():
            try:
                r = self.cycle()
                self.last_error = None
            except Exception as exc:
                if not isinstance(exc, (ClepsydraError, OSError, *arrow_errors())):
                    raise
                # the store away, a full disk: the buffers stay, the next cycle writes them
                logger.warning("export cycle failed, retrying: %s", exc)
                self.last_error, self.cycle_failures = str(exc), self.cycle_failures + 1
                self.last_cycle_s = self.clock_s()
                stop.wait(self.settings.poll_interval_s)
                continue
            self.last_cycle_s = self.clock_s()
            self.beat()
            if not (r.behind and r.rows_pulled):  # (a queue the store answers empty: wait too)
                stop.wait(self.settings.poll_interval_s)
        self.flush_all()

    def flush_all(self) -> None:
        """Write every queue's buffered rows (the exporter stops)."""
        for (topic, queue_id), buf in list(self.buffers.items()):
            if buf.next_offset > buf.start_offset:
                self._flush(topic, queue_id, buf)


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schema)


def lower_priority(nice: int) -> None:
    """Run the calling thread, and the threads it starts later (the pull pool), at niceness
    ``nice`` (Linux: per thread), so that on a shared machine the services and
    their producers get the cores first (DEC-exporter-yields). Where it cannot be set, the
    exporter runs as it is."""
    if nice <= 0:
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except (OSError, AttributeError) as exc:
        logger.info("exporter niceness not set: %s", exc)


def exporter_alive(settings: AnalyticsSettings) -> bool:
    """Whether an exporter's heartbeat is fresh (it cycles at least every poll interval, and
    sleeps at most that long; a stale limit of a minute or ten polls covers slow cycles)."""
    try:
        age_s = time.time() - (settings.state_dir / naming.EXPORTER_HEARTBEAT).stat().st_mtime
    except FileNotFoundError:
        return False
    return age_s < max(60.0, 10 * settings.poll_interval_s)


def run_exporter(settings: AnalyticsSettings, stop: threading.Event) -> None:
    """The ``export`` command: take the lock, prepare, answer /healthz and /metrics on
    CLEPSYDRA_ANALYTICS_EXPORTER_PORT (0: none), run until stopped."""
    telemetry.init_tracing("analytics", settings.common.otel_exporter)
    tune_gc()
    lock = ExporterLock(settings.state_dir)
    if not lock.acquire():
        raise ConfigError(f"another exporter holds {lock.path}: one exporter per export folder")
    health = None
    from clepsydra_analytics.export_shards import ShardedExporter

    try:
        exporter = ShardedExporter(settings)  # every store shard's queues (DEC-store-shards)
        exporter.prepare()
        if settings.exporter_port:
            from clepsydra_analytics.exporter_health import health_server

            # started before the niceness is lowered: probes are answered at once
            health = health_server(exporter, settings.bind, settings.exporter_port)
        lower_priority(settings.nice)
        exporter.run(stop)
    finally:
        if health is not None:
            health.close()
        lock.release()
