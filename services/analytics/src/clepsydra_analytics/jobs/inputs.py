"""What every job reads: the export rows of the window and the exporter's snapshots."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportedRange, ExportFiles, hour_of
from clepsydra_analytics.transforms.common import since


@dataclass(frozen=True, slots=True)
class JobInputs:
    messages: DataFrame
    """Export rows stored at or after ``since_ms``."""
    schedule: DataFrame
    """The newest schedule-levels snapshot (pending per level)."""
    lag: DataFrame
    """The newest consumer-lag snapshot."""
    now_ms: int
    since_ms: int
    files: int


def _snapshot(spark: SparkSession, files: ExportFiles, name: str,
              schema: pa.Schema) -> DataFrame:
    table = files.read_snapshot(name)
    return spark.createDataFrame(table if table is not None else schema.empty_table())


def read_inputs(spark: SparkSession, files: ExportFiles, *, now_ms: int,
                since_ms: int) -> JobInputs:
    """The window's files (checked readable first: a corrupt one is named, not a JVM trace)."""
    ranges: list[ExportedRange] = files.files_since(hour_of(since_ms))
    files.check_readable(ranges)
    if ranges:
        messages = (spark.read.schema(schemas.spark_schema())
                    .option("recursiveFileLookup", "true")
                    .parquet(*[files.spark_path(r.path) for r in ranges]))
    else:
        messages = spark.createDataFrame(schemas.EXPORT_SCHEMA.empty_table())
    return JobInputs(
        messages=since(messages, since_ms),
        schedule=_snapshot(spark, files, schemas.SCHEDULE_SNAPSHOT,
                           schemas.SCHEDULE_SNAPSHOT_SCHEMA),
        lag=_snapshot(spark, files, schemas.LAG_SNAPSHOT, schemas.LAG_SNAPSHOT_SCHEMA),
        now_ms=now_ms, since_ms=since_ms, files=len(ranges))
