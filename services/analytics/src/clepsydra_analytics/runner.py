"""Run the jobs once: export what is new, read the window, run each job, write its tables,
the charts, the HTML report and result.json into a new run folder, drop the oldest runs.

Bad input (an unknown job, a corrupt export file, an unwritable folder) raises a
``ClepsydraError`` naming the problem before or instead of any half-written run."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clepsydra_analytics import jobs, report
from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.export_shards import ShardedExporter
from clepsydra_analytics.exporter import ExporterLock, exporter_alive
from clepsydra_analytics.rows import rows_json
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.status import wait_caught_up
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, ConfigError

logger = logging.getLogger(__name__)

ROWS_IN_RESULT_MAX = 10_000
"""Rows per table kept in result.json (the Parquet tables have all of them)."""


@dataclass
class ExportCatchUp:
    mode: str
    """``exported`` (this process exported), ``waited`` (the running exporter did),
    ``skipped`` (asked not to) or ``timeout``/``store-unavailable`` (ran on what was there)."""
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "rows": self.rows}


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    jobs: list[str]
    since_ms: int
    now_ms: int
    input_files: int = 0
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    export: ExportCatchUp = field(default_factory=lambda: ExportCatchUp("skipped"))
    elapsed_s: float = 0.0

    @property
    def report_path(self) -> Path:
        return self.run_dir / naming.REPORT_HTML

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "report": str(self.report_path), "jobs": self.tables,
                "ran": self.jobs, "sinceMs": self.since_ms, "nowMs": self.now_ms,
                "inputFiles": self.input_files, "export": self.export.to_json(),
                "elapsedS": round(self.elapsed_s, 3)}


def catch_up(settings: AnalyticsSettings) -> ExportCatchUp:
    """Export what is not exported yet: here when no exporter is at work (no fresh heartbeat in
    the state folder, and its lock free), else ask the running one to flush and wait (up to
    the catch-up timeout) until the files reach the queues' current ends."""
    try:
        lock = ExporterLock(settings.state_dir)
        if not exporter_alive(settings) and lock.acquire():
            try:
                exporter = ShardedExporter(settings)  # every store shard's (DEC-store-shards)
                exporter.prepare()
                result = exporter.catch_up(settings.catch_up_timeout_s)
                return ExportCatchUp("exported" if result.caught_up else "timeout",
                                     result.rows_written)
            finally:
                lock.release()
        request_flush(settings)
        files = ExportFiles(settings.export_uri)
        done = wait_caught_up(files, StoreReader(settings.store_url), settings.topics,
                              settings.catch_up_timeout_s)
        return ExportCatchUp("waited" if done else "timeout")
    except ConfigError:
        raise
    except ClepsydraError as exc:
        logger.warning("export before the jobs failed, running on what is exported: %s", exc)
        return ExportCatchUp("store-unavailable")


def request_flush(settings: AnalyticsSettings) -> None:
    """Ask the exporter running on this machine to write its buffers now (it looks at this
    file's time every cycle) instead of at its flush interval."""
    path = settings.state_dir / naming.EXPORT_FLUSH_REQUEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, ns=(time.time_ns(), time.time_ns()))


def _new_run_dir(settings: AnalyticsSettings, now_ms: int) -> tuple[str, Path]:
    run_id = naming.report_run_id(now_ms, uuid.uuid4().hex[:4])
    run_dir = settings.reports_dir / run_id
    try:
        run_dir.mkdir(parents=True)
        probe = run_dir / ".probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"the reports folder {settings.reports_dir} is not writable "
                          f"(CLEPSYDRA_ANALYTICS_REPORTS_DIR): {exc}") from exc
    return run_id, run_dir


def prune_runs(reports_dir: Path, keep: int) -> list[str]:
    """Delete the oldest complete runs beyond ``keep``; their ids."""
    runs = sorted(p for p in reports_dir.iterdir()
                  if p.is_dir() and (p / naming.REPORT_RESULT).exists()) \
        if reports_dir.exists() else []
    dropped = runs[:max(0, len(runs) - keep)]
    for path in dropped:
        shutil.rmtree(path, ignore_errors=True)
    return [p.name for p in dropped]


def run_jobs(settings: AnalyticsSettings, names: list[str] | None, since_s: int, *,
             export_first: bool = True) -> RunResult:
    started = time.monotonic()
    selected = jobs.check_jobs(names)
    files = ExportFiles(settings.export_uri)
    export = catch_up(settings) if export_first else ExportCatchUp("skipped")
    now_ms = int(time.time() * 1000)
    since_ms = now_ms - since_s * 1000
    run_id, run_dir = _new_run_dir(settings, now_ms)
    result = RunResult(run_id, run_dir, selected, since_ms, now_ms, export=export)
    try:
        _run_in_spark(settings, files, result)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)  # no half-written run is ever listed
        raise
    result.elapsed_s = time.monotonic() - started
    report.write_report(result.run_dir, result.to_json())
    temp = run_dir / f".{naming.REPORT_RESULT}"
    temp.write_text(json.dumps(result.to_json(), indent=1))
    os.replace(temp, run_dir / naming.REPORT_RESULT)
    dropped = prune_runs(settings.reports_dir, settings.runs_kept)
    logger.info("report run=%s jobs=%s files=%d elapsed_s=%.1f dropped_runs=%d", run_id,
                ",".join(selected), result.input_files, result.elapsed_s, len(dropped))
    return result


def _run_in_spark(settings: AnalyticsSettings, files: ExportFiles, result: RunResult) -> None:
    from clepsydra_analytics.jobs.inputs import read_inputs
    from clepsydra_analytics.session import session_for

    spark = session_for(settings)
    inputs = read_inputs(spark, files, now_ms=result.now_ms, since_ms=result.since_ms)
    result.input_files = inputs.files
    tables_dir = result.run_dir / naming.REPORT_TABLES_DIR
    for name in result.jobs:
        job_started = time.monotonic()
        for table_name, frame in jobs.job_module(name).run(spark, settings, inputs).items():
            collected = frame.collect()
            spark.createDataFrame(collected, frame.schema).coalesce(1).write.parquet(
                str(tables_dir / table_name))
            result.tables[table_name] = rows_json(
                [r.asDict(recursive=True) for r in collected[:ROWS_IN_RESULT_MAX]])
        logger.info("job done job=%s elapsed_s=%.1f", name, time.monotonic() - job_started)
