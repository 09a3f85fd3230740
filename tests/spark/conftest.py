"""One local SparkSession for the whole spark suite (the JVM's start is the slow part: 7-9 s,
measured here), two cores, few shuffle partitions, no UI, UTC; and helpers to build export rows
by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics import schemas
from clepsydra_analytics.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="clepsydra-spark-tests", shuffle_partitions=2,
                            driver_memory="1g")
    yield session
    session.stop()


def message(msg_id: str, topic: str, store_ms: int, *, queue_offset: int = 0,
            **columns: Any) -> dict[str, Any]:
    """One export row: the given columns, every other one null (or its default)."""
    row: dict[str, Any] = {name: None for name in schemas.COLUMNS}
    row.update({"msg_id": msg_id, "topic": topic, "queue_id": 0, "queue_offset": queue_offset,
                "store_timestamp_ms": store_ms, "reconsume_times": 0, "properties": [],
                "failure_history": [], "body_size_bytes": 10})
    row.update(columns)
    return row


def export_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """A DataFrame with the export schema, built through Arrow like the real files."""
    cols = schemas.empty_columns()
    for r in rows:
        for name in schemas.COLUMNS:
            cols[name].append(r[name])
    return spark.createDataFrame(schemas.to_table(cols))


def snapshot_frame(spark: SparkSession, rows: list[dict[str, Any]],
                   arrow_schema: pa.Schema) -> DataFrame:
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=arrow_schema))
