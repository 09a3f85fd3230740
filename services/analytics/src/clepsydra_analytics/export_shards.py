"""Every store shard's queues exported exactly once (DEC-store-shards): one :class:`Exporter`
per shard, each reading its own shard (its pulls and its group's commits there) and writing
into the one export folder files named with its shard (``s0002-q0003-...``, shard 0's as a
one-store stack's), so each queue resumes from its own files. The cluster's membership is read
from the store the exporter is given (``CLEPSYDRA_STORE_URL``) at the start and every 30 s: a
shard added later is exported from the cycle after.

The snapshot tables (pending messages per level, every group's lag) are written by shard 0's
exporter from shard 0's figures. Each shard's exporter yields its store to that store's
producers on its own (DEC-exporter-yields: it watches its own shard's writes).
"""

from __future__ import annotations

import logging
import threading

from clepsydra_analytics.export_files import ExportFiles, arrow_errors
from clepsydra_analytics.exporter import CycleResult, Exporter, catch_up_cycles
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.shard_map import ShardMap

logger = logging.getLogger(__name__)


class ShardedExporter:
    """The exporter of every store shard; with one shard, one :class:`Exporter` as before."""

    def __init__(self, settings: AnalyticsSettings) -> None:
        self.settings = settings
        first = Exporter(settings)
        self.parts: dict[int, Exporter] = {0: first}
        self.shards = ShardMap(first.reader.http, ask=True)
        self._prepared = False

    # ---- what the health endpoint and the runner read ----------------------------------------

    def clock_s(self) -> float:
        return self.parts[0].clock_s()

    @property
    def last_cycle_s(self) -> float | None:
        times = [p.last_cycle_s for p in self.parts.values() if p.last_cycle_s is not None]
        return min(times) if times else None

    @property
    def last_error(self) -> str | None:
        return next((p.last_error for p in self.parts.values() if p.last_error), None)

    @property
    def rows_written_total(self) -> int:
        return sum(p.rows_written_total for p in self.parts.values())

    @property
    def cycle_failures(self) -> int:
        return sum(p.cycle_failures for p in self.parts.values())

    @property
    def rows_pulled_total(self) -> int:
        return sum(p.rows_pulled_total for p in self.parts.values())

    @property
    def lag_messages(self) -> int | None:
        """Every shard's lag summed (None until a shard's cycle has measured one)."""
        lags = [p.lag_messages for p in self.parts.values() if p.lag_messages is not None]
        return sum(lags) if lags else None

    @property
    def paused_s(self) -> float:
        return sum(p.paused_s for p in self.parts.values())

    # ---- the shards --------------------------------------------------------------------------

    def _update_parts(self) -> None:
        """An exporter for every shard the membership names (shard 0's reads the bootstrap
        store as before; the others their own)."""
        try:
            members = self.shards.members()
        except ClepsydraError as exc:
            logger.warning("store cluster membership not readable: %s", exc)
            return
        for member in members:
            if member.id in self.parts:
                continue
            part = Exporter(self.settings, files=ExportFiles(self.settings.export_uri,
                                                             shard=member.id),
                            reader=StoreReader(member.url), snapshots=False)
            if self._prepared:
                part.prepare()
            self.parts[member.id] = part
            logger.info("exporting store shard %d at %s", member.id, member.url)

    def prepare(self) -> None:
        self._update_parts()
        for part in self.parts.values():
            part.prepare()
        self._prepared = True

    def cycle(self, *, force_flush: bool = False) -> CycleResult:
        self._update_parts()
        total = CycleResult()
        for part in list(self.parts.values()):
            r = part.cycle(force_flush=force_flush)
            total.rows_pulled += r.rows_pulled
            total.rows_written += r.rows_written
            total.files_written += r.files_written
            total.caught_up = total.caught_up and r.caught_up
            total.behind = total.behind or r.behind
        return total

    def catch_up(self, timeout_s: float) -> CycleResult:
        """Cycles until every shard's queues are exported up to their ends, all flushed."""
        for part in self.parts.values():
            part.pace = False  # asked to finish: no pauses for writers
        try:
            return catch_up_cycles(self.cycle, timeout_s)
        finally:
            for part in self.parts.values():
                part.pace = True

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: every shard's cycle in turn, as ``Exporter.run`` cycles
        (a failing cycle - its shard away, a write error - is logged and retried after the
        poll interval, the other shards go on; the poll interval's wait follows a round
        unless a shard pulled rows and left a queue behind), then what is buffered is
        written."""
        while not stop.is_set():
            self._update_parts()
            idle = True
            for shard, part in list(self.parts.items()):
                part._wait = stop.wait
                try:
                    r = part.cycle()
                    part.last_error = None
                    idle = idle and not (r.behind and r.rows_pulled)
                except Exception as exc:
                    if not isinstance(exc, (ClepsydraError, OSError, *arrow_errors())):
                        raise
                    logger.warning("export cycle failed shard=%d, retrying: %s", shard, exc)
                    part.last_error, part.cycle_failures = str(exc), part.cycle_failures + 1
                part.last_cycle_s = part.clock_s()
            if all(p.last_error is None for p in self.parts.values()):
                self.parts[0].beat()
            if idle:
                stop.wait(self.settings.poll_interval_s)
        for part in self.parts.values():
            part.flush_all()
