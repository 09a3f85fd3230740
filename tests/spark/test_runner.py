"""The runner over export files on disk: result JSON shape, report with charts, tables, old
runs pruned; bad input named clearly (unknown job, bad --since, corrupt Parquet)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clepsydra_analytics import schemas
from clepsydra_analytics.cli_jobs import jobs_run
from clepsydra_analytics.export_files import CorruptExportFile, ExportFiles, hour_of
from clepsydra_analytics.runner import run_jobs
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core import naming
from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.analytics import RunResult
from tests.spark.conftest import message

pytestmark = pytest.mark.spark


def write_export(files: ExportFiles, now_ms: int) -> None:
    rows = [message("m1", "orders", now_ms - 5_000, delay_level=3,
                    deliver_ts_ms=now_ms - 5_020),
            message("m2", "orders", now_ms - 4_000, queue_offset=1),
            message("r1", "%RETRY%billing", now_ms - 3_000, consumer_group="billing",
                    retry_topic="orders", origin_message_id="m2", reconsume_times=1),
            message("d1", "%DLQ%billing", now_ms - 2_000, consumer_group="billing",
                    retry_topic="orders", origin_message_id="m2", reconsume_times=2,
                    failure_reason="ValueError: bad order")]
    for i, row in enumerate(rows):
        table = schemas.to_table({k: [row[k]] for k in schemas.COLUMNS})
        files.write_range(row["topic"], 0, i, i + 1, hour_of(row["store_timestamp_ms"]), table)


@pytest.fixture
def settings(tmp_path: Path, spark: SparkSession) -> AnalyticsSettings:
    return AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path),
                                       "CLEPSYDRA_SPARK_MASTER": "local[2]",
                                       "CLEPSYDRA_ANALYTICS_RUNS_KEPT": "2"})


def test_run_writes_tables_report_and_camel_case_rows(settings: AnalyticsSettings) -> None:
    now_ms = int(time.time() * 1000)
    write_export(ExportFiles(settings.export_uri), now_ms)
    out = io.StringIO()
    assert jobs_run(settings, jobs=None, since="1h", output="json", export_first=False,
                    out=out) == 0
    result = json.loads(out.getvalue())
    # the real rows are what the API's wire type reads (a null column left out)
    assert RunResult.from_json(result).to_json() == _without_nulls(result)
    assert Path(result["report"]).name == naming.REPORT_HTML and Path(result["report"]).exists()
    [lateness] = result["jobs"]["lateness"]
    assert {k: lateness[k] for k in ("level", "count", "p50Ms", "maxMs", "early", "pending")} \
        == {"level": 3, "count": 1, "p50Ms": 20, "maxMs": 20, "early": 0, "pending": 0}
    [funnel] = result["jobs"]["funnel"]
    assert {k: funnel[k] for k in ("group", "topic", "total", "firstTime", "afterRetries",
                                   "deadLettered")} == {
        "group": "billing", "topic": "orders", "total": 2, "firstTime": 1, "afterRetries": {},
        "deadLettered": 1}
    [dead] = result["jobs"]["dead-letters"]
    assert (dead["group"], dead["reason"], dead["count"]) == ("billing",
                                                              "ValueError: bad order", 1)
    assert dead["oldestAgeS"] >= 2
    run_dir = Path(result["report"]).parent
    charts = {p.name for p in (run_dir / naming.REPORT_CHARTS_DIR).iterdir()}
    assert {"lateness.png", "funnel.png", "dead-letters.png", "throughput.png"} <= charts
    assert (run_dir / naming.REPORT_TABLES_DIR / "lateness").is_dir()
    assert 'src="charts/lateness.png"' in Path(result["report"]).read_text()


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_old_runs_are_dropped_beyond_the_limit(settings: AnalyticsSettings) -> None:
    ids = [run_jobs(settings, ["throughput"], 3600, export_first=False).run_id
           for _ in range(3)]
    kept = sorted(p.name for p in settings.reports_dir.iterdir())
    assert kept == ids[1:]


def test_unknown_job_and_bad_since_are_named(settings: AnalyticsSettings,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValidationError, match="unknown job 'latency'"):
        run_jobs(settings, ["latency"], 60, export_first=False)
    out = io.StringIO()
    assert jobs_run(settings, jobs=None, since="2 hours", output="json", export_first=False,
                    out=out) == 2
    assert json.loads(out.getvalue())["error"] == "INVALID_SINCE"
    assert "--since '2 hours' is not a duration" in capsys.readouterr().err
    assert not settings.reports_dir.exists() or not any(settings.reports_dir.iterdir())


def test_corrupt_parquet_file_is_named_and_nothing_else_lost(
        settings: AnalyticsSettings, capsys: pytest.CaptureFixture[str]) -> None:
    now_ms = int(time.time() * 1000)
    files = ExportFiles(settings.export_uri)
    write_export(files, now_ms)
    victim = files.ranges()[0]
    Path(victim.path).write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(CorruptExportFile, match=victim.path):
        run_jobs(settings, None, 3600, export_first=False)
    assert jobs_run(settings, jobs=None, since="1h", output="text", export_first=False,
                    out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert victim.path in err and "Traceback" not in err
    assert len(files.ranges()) == 4  # the other files are untouched


def test_the_export_is_read_from_a_uri(tmp_path: Path, spark: SparkSession) -> None:
    """CLEPSYDRA_ANALYTICS_EXPORT_URI takes a URI that pyarrow (the
    exporter's writes) and Spark (the jobs' reads) both understand; here a file:// one."""
    uri = (tmp_path / "shared" / "export").as_uri()
    settings = AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path / "home"),
                                           "CLEPSYDRA_SPARK_MASTER": "local[2]",
                                           "CLEPSYDRA_ANALYTICS_EXPORT_URI": uri})
    now_ms = int(time.time() * 1000)
    write_export(ExportFiles(settings.export_uri), now_ms)
    assert (tmp_path / "shared" / "export" / "v1").is_dir()
    result = run_jobs(settings, ["throughput"], 3600, export_first=False).to_json()
    assert result["inputFiles"] == 4
    assert sum(r["messages"] for r in result["jobs"]["throughput"]) == 4
